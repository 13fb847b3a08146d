package main

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// The verbs a controller-runtime or client-go user relies on.
var wantVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

type kindUnderTest struct {
	gvr       schema.GroupVersionResource
	kind      string
	singular  string
	shortName string
}

var kinds = []kindUnderTest{
	{gvr: transfersGVR, kind: "NamespaceTransfer", singular: "namespacetransfer", shortName: "nst"},
	{gvr: claimsGVR, kind: "EphemeralClaim", singular: "ephemeralclaim", shortName: "ec"},
}

// discoveryScenario resolves both kinds the ways client-go users do: a
// DeferredDiscoveryRESTMapper behind kubectl's shortcut expander, and
// ServerPreferredResources (what the garbage collector and namespace
// controller read).
func discoveryScenario(_ context.Context, r *run) {
	dc, err := discovery.NewDiscoveryClientForConfig(r.config)
	if err != nil {
		setupError("discovery client: %v", err)
	}
	cached := memory.NewMemCacheClient(dc)
	deferred := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	mapper := restmapper.NewShortcutExpander(deferred, cached, func(w string) { r.infof("shortcut expander warning: %s", w) })

	for _, k := range kinds {
		wantGVK := k.gvr.GroupVersion().WithKind(k.kind)
		inputs := []schema.GroupVersionResource{
			{Resource: k.gvr.Resource},
			{Resource: k.singular},
			{Group: group, Resource: k.gvr.Resource},
			k.gvr,
		}
		if k.shortName != "" {
			inputs = append(inputs, schema.GroupVersionResource{Resource: k.shortName})
		}
		for _, in := range inputs {
			gvr, err := mapper.ResourceFor(in)
			switch {
			case err != nil:
				r.failf("ResourceFor(%v): %v", in, err)
			case gvr != k.gvr:
				r.failf("ResourceFor(%v) = %v, want %v", in, gvr, k.gvr)
			}
			gvk, err := mapper.KindFor(in)
			switch {
			case err != nil:
				r.failf("KindFor(%v): %v", in, err)
			case gvk != wantGVK:
				r.failf("KindFor(%v) = %v, want %v", in, gvk, wantGVK)
			}
		}

		mapping, err := mapper.RESTMapping(wantGVK.GroupKind())
		switch {
		case err != nil:
			r.failf("RESTMapping(%v): %v", wantGVK.GroupKind(), err)
		default:
			if mapping.Resource != k.gvr {
				r.failf("RESTMapping(%v).Resource = %v, want %v", wantGVK.GroupKind(), mapping.Resource, k.gvr)
			}
			if mapping.GroupVersionKind != wantGVK {
				r.failf("RESTMapping(%v).GroupVersionKind = %v, want %v", wantGVK.GroupKind(), mapping.GroupVersionKind, wantGVK)
			}
			if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
				r.failf("RESTMapping(%v) scope = %s, want namespace", wantGVK.GroupKind(), mapping.Scope.Name())
			}
		}
		mapping, err = mapper.RESTMapping(wantGVK.GroupKind(), version)
		if err != nil {
			r.failf("RESTMapping(%v, %s): %v", wantGVK.GroupKind(), version, err)
		} else if mapping.Resource != k.gvr {
			r.failf("RESTMapping(%v, %s).Resource = %v", wantGVK.GroupKind(), version, mapping.Resource)
		}
		singular, err := mapper.ResourceSingularizer(k.gvr.Resource)
		if err != nil || singular != k.singular {
			r.failf("ResourceSingularizer(%s) = %q, %v; want %q", k.gvr.Resource, singular, err, k.singular)
		}
	}

	// ServerPreferredResources: what namespace deletion and the garbage
	// collector enumerate. A failure for another group is tolerated (the
	// list is partial then), one for ours is not.
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		if failed, ok := err.(*discovery.ErrGroupDiscoveryFailed); ok {
			for gv, e := range failed.Groups {
				if gv.Group == group {
					r.failf("ServerPreferredResources: our group %s failed: %v", gv, e)
				} else {
					r.infof("ServerPreferredResources: %s failed (not ours): %v", gv, e)
				}
			}
		} else {
			r.failf("ServerPreferredResources: %v", err)
			return
		}
	}
	checkResourceLists(r, "ServerPreferredResources", lists)

	// The same document, fetched for the group version alone.
	list, err := dc.ServerResourcesForGroupVersion(group + "/" + version)
	if err != nil {
		r.failf("ServerResourcesForGroupVersion(%s/%s): %v", group, version, err)
	} else {
		checkResourceLists(r, "ServerResourcesForGroupVersion", []*metav1.APIResourceList{list})
	}

	// ServerGroups names our group with v1alpha1 preferred.
	groups, err := dc.ServerGroups()
	if err != nil {
		r.failf("ServerGroups: %v", err)
		return
	}
	found := false
	for _, g := range groups.Groups {
		if g.Name != group {
			continue
		}
		found = true
		if g.PreferredVersion.GroupVersion != group+"/"+version {
			r.failf("ServerGroups: %s prefers %q", group, g.PreferredVersion.GroupVersion)
		}
	}
	if !found {
		r.failf("ServerGroups: no group %s", group)
	}
}

// checkResourceLists finds both resources in lists with their kind, scope,
// short names and verbs.
func checkResourceLists(r *run, source string, lists []*metav1.APIResourceList) {
	for _, k := range kinds {
		var res *metav1.APIResource
		for _, l := range lists {
			if l == nil || l.GroupVersion != k.gvr.GroupVersion().String() {
				continue
			}
			for i := range l.APIResources {
				if l.APIResources[i].Name == k.gvr.Resource {
					res = &l.APIResources[i]
				}
			}
		}
		if res == nil {
			r.failf("%s: no %s in %s", source, k.gvr.Resource, k.gvr.GroupVersion())
			continue
		}
		if res.Kind != k.kind {
			r.failf("%s: %s has kind %q, want %q", source, k.gvr.Resource, res.Kind, k.kind)
		}
		if !res.Namespaced {
			r.failf("%s: %s is not namespaced", source, k.gvr.Resource)
		}
		for _, v := range wantVerbs {
			if !slices.Contains(res.Verbs, v) {
				r.failf("%s: %s lacks verb %q (has %v)", source, k.gvr.Resource, v, []string(res.Verbs))
			}
		}
		if k.shortName != "" && !slices.Contains(res.ShortNames, k.shortName) {
			r.failf("%s: %s lacks short name %q (has %v)", source, k.gvr.Resource, k.shortName, res.ShortNames)
		}
		r.infof("%s: %s kind=%s namespaced=%v verbs=%v shortNames=%v", source, k.gvr.Resource, res.Kind, res.Namespaced, []string(res.Verbs), res.ShortNames)
	}
}
