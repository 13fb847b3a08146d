package main

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

const applyManager = "clientgo-test"

// applyScenario: server-side apply through the dynamic client, as
// controller-runtime's client.Apply and kubectl apply --server-side send it.
//
//  1. Apply creates a NamespaceTransfer; the result carries a managedFields
//     entry manager=clientgo-test, operation=Apply, owning the spec.
//  2. Applying it again with a label updates it; the entry now owns the label.
//  3. Applying it without the label removes the label: the manager owned it
//     alone.
//  4. Another manager applying a different value of a field clientgo-test
//     owns gets 409 Conflict without force, and takes it over with force.
//  5. Apply creates an EphemeralClaim too.
func applyScenario(ctx context.Context, r *run) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(r.config)
	transfers := dyn.Resource(transfersGVR).Namespace(r.namespace)
	const name = "applied"

	// 1. Create.
	created, err := transfers.Apply(ctx, name, newTransfer(r.namespace, name), metav1.ApplyOptions{FieldManager: applyManager, Force: true})
	if err != nil {
		r.failf("apply (create) of namespacetransfer %s: %v", name, err)
		return
	}
	entry := applyEntry(r, "apply (create)", created, applyManager)
	if entry != nil && !strings.Contains(fieldsOf(entry), `"f:spec"`) {
		r.failf("apply (create): the %s entry does not own the spec: %s", applyManager, fieldsOf(entry))
	}
	got, err := transfers.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		r.failf("get after apply: %v", err)
	} else {
		applyEntry(r, "get after apply (create)", got, applyManager)
	}

	// 2. Update: add a label.
	labelled := newTransfer(r.namespace, name)
	labelled.SetLabels(map[string]string{"clientgo-test/step": "two"})
	updated, err := transfers.Apply(ctx, name, labelled, metav1.ApplyOptions{FieldManager: applyManager, Force: true})
	if err != nil {
		r.failf("apply (update) of namespacetransfer %s: %v", name, err)
		return
	}
	if updated.GetLabels()["clientgo-test/step"] != "two" {
		r.failf("apply (update): labels = %v, want clientgo-test/step=two", updated.GetLabels())
	}
	if updated.GetResourceVersion() == created.GetResourceVersion() {
		r.failf("apply (update): the resourceVersion stayed %s", created.GetResourceVersion())
	}
	if updated.GetUID() != created.GetUID() {
		r.failf("apply (update): the uid changed from %s to %s: it made a new object", created.GetUID(), updated.GetUID())
	}
	if entry := applyEntry(r, "apply (update)", updated, applyManager); entry != nil && !strings.Contains(fieldsOf(entry), `"f:clientgo-test/step"`) {
		r.failf("apply (update): the %s entry does not own the label: %s", applyManager, fieldsOf(entry))
	}

	// 3. The label, owned by this manager alone, goes when the applied
	// configuration no longer has it.
	dropped, err := transfers.Apply(ctx, name, newTransfer(r.namespace, name), metav1.ApplyOptions{FieldManager: applyManager, Force: true})
	if err != nil {
		r.failf("apply (dropping the label): %v", err)
	} else if _, ok := dropped.GetLabels()["clientgo-test/step"]; ok {
		r.failf("apply (dropping the label): the label stayed: %v", dropped.GetLabels())
	}

	// 4. Conflicts between managers.
	mine := newTransfer(r.namespace, name)
	mine.SetAnnotations(map[string]string{"clientgo-test/owner": applyManager})
	if _, err := transfers.Apply(ctx, name, mine, metav1.ApplyOptions{FieldManager: applyManager, Force: true}); err != nil {
		r.failf("apply (annotation): %v", err)
		return
	}
	theirs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/" + version,
		"kind":       "NamespaceTransfer",
		"metadata": map[string]any{
			"name": name, "namespace": r.namespace,
			"annotations": map[string]any{"clientgo-test/owner": "other"},
		},
	}}
	_, err = transfers.Apply(ctx, name, theirs, metav1.ApplyOptions{FieldManager: "other"})
	if !apierrors.IsConflict(err) {
		r.failf("apply by another manager of a field %s owns, without force: want 409 Conflict, got %v", applyManager, err)
	}
	forced, err := transfers.Apply(ctx, name, theirs, metav1.ApplyOptions{FieldManager: "other", Force: true})
	if err != nil {
		r.failf("apply by another manager with force: %v", err)
	} else {
		if forced.GetAnnotations()["clientgo-test/owner"] != "other" {
			r.failf("apply with force: annotations = %v", forced.GetAnnotations())
		}
		applyEntry(r, "apply with force", forced, "other")
	}

	// 5. The other kind.
	claim, err := dyn.Resource(claimsGVR).Namespace(r.namespace).Apply(ctx, name, newClaim(r.namespace, name), metav1.ApplyOptions{FieldManager: applyManager, Force: true})
	if err != nil {
		r.failf("apply (create) of ephemeralclaim %s: %v", name, err)
	} else {
		applyEntry(r, "apply (create) of an ephemeralclaim", claim, applyManager)
	}
}

// applyEntry finds manager's Apply entry in obj's managedFields, failing
// the check (and returning nil) when there is none or it is malformed.
func applyEntry(r *run, step string, obj *unstructured.Unstructured, manager string) *metav1.ManagedFieldsEntry {
	fields := obj.GetManagedFields()
	for i := range fields {
		e := &fields[i]
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply {
			continue
		}
		if e.APIVersion != group+"/"+version {
			r.failf("%s: the %s entry has apiVersion %q", step, manager, e.APIVersion)
		}
		if e.FieldsType != "FieldsV1" || e.FieldsV1 == nil {
			r.failf("%s: the %s entry has fieldsType %q and fieldsV1 %v", step, manager, e.FieldsType, e.FieldsV1)
		}
		if e.Time == nil {
			r.failf("%s: the %s entry has no time", step, manager)
		}
		return e
	}
	var have []string
	for _, e := range fields {
		have = append(have, e.Manager+"/"+string(e.Operation))
	}
	r.failf("%s: no managedFields entry manager=%s operation=Apply (have %v)", step, manager, have)
	return nil
}

func fieldsOf(e *metav1.ManagedFieldsEntry) string {
	if e.FieldsV1 == nil {
		return ""
	}
	return string(e.FieldsV1.Raw)
}
