package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
)

// writeRetryFor is how long a write keeps retrying errors that mean "our
// server (or the aggregator's view of it) is not back yet".
const writeRetryFor = 90 * time.Second

// newTransfer is a Source-role NamespaceTransfer whose claim does not exist:
// valid, and it just waits.
func newTransfer(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version,
		"kind":       "NamespaceTransfer",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"source":      map[string]any{"name": "claim-" + name},
			"destination": map[string]any{"namespace": "dev"},
		},
	}}
}

// newClaim is an EphemeralClaim for a Pod that does not exist.
func newClaim(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version,
		"kind":       "EphemeralClaim",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"owner": map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "runner"},
			"claimTemplate": map[string]any{"spec": map[string]any{
				"accessModes": []any{"ReadWriteOnce"},
				"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
			}},
		},
	}}
}

// newObject builds an object of either resource.
func newObject(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	if gvr == transfersGVR {
		return newTransfer(namespace, name)
	}
	return newClaim(namespace, name)
}

// writer makes the changes the informers must follow, retrying while our
// server is away.
type writer struct {
	client    dynamic.Interface
	namespace string
}

func (w *writer) create(ctx context.Context, gvr schema.GroupVersionResource, name string) error {
	return retryWrite(ctx, fmt.Sprintf("creating %s %s", gvr.Resource, name), func(ctx context.Context, retried bool) error {
		_, err := w.client.Resource(gvr).Namespace(w.namespace).Create(ctx, newObject(gvr, w.namespace, name), metav1.CreateOptions{})
		if retried && apierrors.IsAlreadyExists(err) {
			return nil // an earlier attempt got through
		}
		return err
	})
}

func (w *writer) label(ctx context.Context, gvr schema.GroupVersionResource, name, key, value string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
	return retryWrite(ctx, fmt.Sprintf("labelling %s %s", gvr.Resource, name), func(ctx context.Context, _ bool) error {
		_, err := w.client.Resource(gvr).Namespace(w.namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

func (w *writer) delete(ctx context.Context, gvr schema.GroupVersionResource, name string) error {
	return retryWrite(ctx, fmt.Sprintf("deleting %s %s", gvr.Resource, name), func(ctx context.Context, retried bool) error {
		err := w.client.Resource(gvr).Namespace(w.namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if retried && apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// retryWrite runs f until it succeeds, fails for good, or writeRetryFor
// passes.
func retryWrite(ctx context.Context, what string, f func(ctx context.Context, retried bool) error) error {
	deadline := time.Now().Add(writeRetryFor)
	retried := false
	for {
		attempt, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := f(attempt, retried)
		cancel()
		if err == nil {
			return nil
		}
		if !isUnavailable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		retried = true
		time.Sleep(500 * time.Millisecond)
	}
}

// isUnavailable: the request may succeed if tried again in a moment.
func isUnavailable(err error) bool {
	return apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) ||
		apierrors.IsUnexpectedServerError(err) ||
		errors.Is(err, context.DeadlineExceeded) ||
		utilnet.IsConnectionRefused(err) ||
		utilnet.IsConnectionReset(err) ||
		utilnet.IsProbableEOF(err)
}
