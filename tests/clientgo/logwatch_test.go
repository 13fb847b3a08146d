package main

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		line string
		want entryKind
	}{
		{`I1130 reflector.go:343] "Caches populated" type="*v1.PartialObjectMetadata"`, entryFine},
		{`I1130 reflector.go:664] "Warning: watch ended with error" type="*v1.PartialObjectMetadata" err="an error on the server (\"unable to decode an event from the watch stream: unable to decode watch event: no kind \\\"NamespaceTransfer\\\" is registered for version \\\"storage.transfer.k8s.io/v1alpha1\\\" in scheme \\\"k8s.io/client-go/metadata/metadata.go:56\\\"\") has prevented the request from succeeding"`, entryBroken},
		{`E1130 "Unable to decode an event from the watch stream" err="json: cannot unmarshal string into Go value"`, entryBroken},
		{`I1130 reflector.go:664] "Warning: watch ended with error" type="*v1.PartialObjectMetadata" err="an error on the server (\"unable to decode an event from the watch stream: stream error: stream ID 1657; INTERNAL_ERROR; received from peer\") has prevented the request from succeeding"`, entryTransport},
		{`I1130 "Warning: watch ended with error" err="very short watch: unexpected EOF"`, entryTransport},
		{`E1130 reflector.go:1015] "Unexpected watch event object type" expectedType="*unstructured.Unstructured" actualType="*v1.Status"`, entryBroken},
		{`W1130 "Failed to watch" err="failed to list: the server is currently unable to handle the request"`, entryFine},
	}
	for _, c := range cases {
		if got := classify(c.line); got != c.want {
			t.Errorf("classify(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}
