package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const (
	// syncTimeout: how long the informers may take to fill their stores.
	syncTimeout = 2 * time.Minute
	// convergeTimeout: how long a store may lag behind a fresh LIST once the
	// writes have stopped.
	convergeTimeout = 2 * time.Minute
	// objectsPerRound of each resource are created in each round of writes.
	objectsPerRound = 3
)

type informerOptions struct {
	restarts  int
	quiet     time.Duration
	watchList string
}

// informerUnderTest is one informer on one resource, and what it saw.
type informerUnderTest struct {
	key      string // "dynamic/namespacetransfers": its requestCounter key
	gvr      schema.GroupVersionResource
	metadata bool
	informer cache.SharedIndexInformer

	adds, updates, deletes atomic.Int64
}

// informersScenario runs a dynamic and a metadata informer on each resource
// in one namespace, writes while they run, has our server restarted, and
// checks that every store ends up as a fresh LIST, with no watch broken by
// an event client-go cannot decode and no re-list while idle.
func informersScenario(ctx context.Context, r *run, opts informerOptions) {
	watchListOn := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	r.infof("WatchListClient=%v", watchListOn)
	switch opts.watchList {
	case "on", "off":
		if watchListOn != (opts.watchList == "on") {
			setupError("-watch-list=%s, but the WatchListClient feature gate is %v: set KUBE_FEATURE_WatchListClient", opts.watchList, watchListOn)
		}
	case "":
	default:
		setupError("-watch-list wants on or off, not %q", opts.watchList)
	}

	// The checker's and the writer's clients are not counted.
	plain := dynamic.NewForConfigOrDie(r.config)
	plainMeta := metadata.NewForConfigOrDie(r.config)
	w := &writer{client: plain, namespace: r.namespace}

	counter := newRequestCounter()
	counted := rest.CopyConfig(r.config)
	counted.Wrap(counter.wrap)
	dyn := dynamic.NewForConfigOrDie(counted)
	metaClient := metadata.NewForConfigOrDie(counted)

	resources := []schema.GroupVersionResource{transfersGVR, claimsGVR}

	// Something to list before the informers start.
	for _, gvr := range resources {
		for i := range objectsPerRound {
			if err := w.create(ctx, gvr, fmt.Sprintf("seed-%d", i)); err != nil {
				r.failf("%v", err)
				return
			}
		}
	}

	dynFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, r.namespace, nil)
	metaFactory := metadatainformer.NewFilteredSharedInformerFactory(metaClient, 0, r.namespace, nil)
	var informers []*informerUnderTest
	for _, gvr := range resources {
		informers = append(informers,
			&informerUnderTest{key: "dynamic/" + gvr.Resource, gvr: gvr, informer: dynFactory.ForResource(gvr).Informer()},
			&informerUnderTest{key: "metadata/" + gvr.Resource, gvr: gvr, metadata: true, informer: metaFactory.ForResource(gvr).Informer()},
		)
	}
	for _, inf := range informers {
		_, err := inf.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { inf.adds.Add(1) },
			UpdateFunc: func(any, any) { inf.updates.Add(1) },
			DeleteFunc: func(any) { inf.deletes.Add(1) },
		})
		if err != nil {
			setupError("adding an event handler: %v", err)
		}
	}

	informerCtx, stopInformers := context.WithCancel(ctx)
	defer func() {
		stopInformers()
		dynFactory.Shutdown()
		metaFactory.Shutdown()
	}()
	dynFactory.Start(informerCtx.Done())
	metaFactory.Start(informerCtx.Done())

	syncCtx, cancelSync := context.WithTimeout(ctx, syncTimeout)
	for _, inf := range informers {
		if !cache.WaitForCacheSync(syncCtx.Done(), inf.informer.HasSynced) {
			r.failf("%s: the informer did not sync within %s", inf.key, syncTimeout)
		}
	}
	cancelSync()
	initial := map[string]requestCounts{}
	for _, inf := range informers {
		initial[inf.key] = counter.of(inf.key)
		r.infof("%s synced with %s", inf.key, initial[inf.key])
	}
	checkInitialSync(r, informers, initial, watchListOn)

	// Write, restart, write, restart, write. Before each restart the stores
	// have caught up and every informer holds an open watch, so that the
	// restart cuts live watches rather than a reflector backing off.
	var sinceRestart map[string]requestCounts
	for round := 1; round <= opts.restarts+1; round++ {
		if err := writeRound(ctx, w, resources, round); err != nil {
			r.failf("round %d of writes: %v", round, err)
			return
		}
		if !converge(ctx, r, informers, plain, plainMeta, fmt.Sprintf("after round %d of writes", round)) {
			reportInformers(r, informers, counter)
			return
		}
		if sinceRestart != nil {
			for _, inf := range informers {
				r.infof("restart %d: %s caught up with %s", round-1, inf.key, counter.of(inf.key).minus(sinceRestart[inf.key]))
			}
		}
		if round > opts.restarts {
			break
		}
		if !waitWatching(ctx, r, informers, counter) {
			return
		}
		sinceRestart = snapshot(informers, counter)
		if err := r.restartServer(); err != nil {
			r.failf("%v", err)
			return
		}
	}

	// Idle: a healthy watch survives the server's bookmarks and needs no
	// new list.
	before := snapshot(informers, counter)
	r.infof("watching idle informers for %s", opts.quiet)
	select {
	case <-time.After(opts.quiet):
	case <-ctx.Done():
		r.failf("deadline while idle: %v", ctx.Err())
		return
	}
	for _, inf := range informers {
		now := counter.of(inf.key)
		relists := (now.lists - before[inf.key].lists) + (now.watchLists - before[inf.key].watchLists)
		if relists > 0 {
			r.failf("%s re-listed %d time(s) in %s with no change and no restart (requests then: %s; now: %s): its watch broke",
				inf.key, relists, opts.quiet, before[inf.key], now)
		}
	}
	converge(ctx, r, informers, plain, plainMeta, "after the idle period")
	reportInformers(r, informers, counter)
}

func snapshot(informers []*informerUnderTest, counter *requestCounter) map[string]requestCounts {
	out := map[string]requestCounts{}
	for _, inf := range informers {
		out[inf.key] = counter.of(inf.key)
	}
	return out
}

// waitWatching waits until each informer's latest successful request is a
// watch (or a watch-list stream): its reflector is past any list and
// holds a watch open.
func waitWatching(ctx context.Context, r *run, informers []*informerUnderTest, counter *requestCounter) bool {
	deadline := time.Now().Add(convergeTimeout)
	for {
		var idle []string
		for _, inf := range informers {
			if !counter.of(inf.key).watching {
				idle = append(idle, inf.key)
			}
		}
		if len(idle) == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.failf("%v: no watch open within %s", idle, convergeTimeout)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkInitialSync: with WatchList on, each informer must have filled its
// store from a watch-list stream (the first request of each is one) and
// never fallen back to LIST; with it off, from a LIST.
func checkInitialSync(r *run, informers []*informerUnderTest, initial map[string]requestCounts, watchListOn bool) {
	for _, inf := range informers {
		c := initial[inf.key]
		if watchListOn {
			if c.watchListsOK == 0 {
				r.failf("%s: WatchList is on but the informer made no successful watch-list request (%s)", inf.key, c)
			}
			if c.lists > 0 {
				r.failf("%s: WatchList is on but the informer fell back to LIST: its watch-list stream failed (%s)", inf.key, c)
			}
		} else {
			if c.watchLists > 0 {
				r.failf("%s: WatchList is off but the informer made watch-list requests (%s)", inf.key, c)
			}
			if c.listsOK == 0 {
				r.failf("%s: the informer synced without a successful LIST (%s)", inf.key, c)
			}
		}
	}
}

// writeRound creates objectsPerRound objects of each resource, labels the
// ones of the previous round, and deletes one of them.
func writeRound(ctx context.Context, w *writer, resources []schema.GroupVersionResource, round int) error {
	for _, gvr := range resources {
		for i := range objectsPerRound {
			if err := w.create(ctx, gvr, fmt.Sprintf("round-%d-%d", round, i)); err != nil {
				return err
			}
		}
		previous := "seed"
		if round > 1 {
			previous = fmt.Sprintf("round-%d", round-1)
		}
		for i := range objectsPerRound {
			if err := w.label(ctx, gvr, fmt.Sprintf("%s-%d", previous, i), "round", fmt.Sprint(round)); err != nil {
				return err
			}
		}
		if err := w.delete(ctx, gvr, previous+"-0"); err != nil {
			return err
		}
	}
	return nil
}

// converge waits until every informer's store holds exactly what a fresh
// LIST returns (names and resourceVersions), and reports the difference of
// those that never do.
func converge(ctx context.Context, r *run, informers []*informerUnderTest, dyn dynamic.Interface, meta metadata.Interface, when string) bool {
	deadline := time.Now().Add(convergeTimeout)
	pending := informers
	lastDiff := map[string]string{}
	for {
		var still []*informerUnderTest
		for _, inf := range pending {
			fresh, err := freshList(ctx, dyn, meta, inf, r.namespace)
			if err != nil {
				lastDiff[inf.key] = fmt.Sprintf("listing: %v", err)
				still = append(still, inf)
				continue
			}
			store, err := storeContents(inf.informer.GetStore())
			if err != nil {
				lastDiff[inf.key] = err.Error()
				still = append(still, inf)
				continue
			}
			if d := diff(fresh, store); d != "" {
				lastDiff[inf.key] = d
				still = append(still, inf)
			}
		}
		if len(still) == 0 {
			r.infof("all %d informers match a fresh LIST %s", len(informers), when)
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, inf := range still {
				r.failf("%s %s: the store did not converge to a fresh LIST within %s: %s", inf.key, when, convergeTimeout, lastDiff[inf.key])
			}
			return false
		}
		pending = still
		time.Sleep(500 * time.Millisecond)
	}
}

// freshList is name → resourceVersion, read the way the informer's client reads.
func freshList(ctx context.Context, dyn dynamic.Interface, meta metadata.Interface, inf *informerUnderTest, namespace string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out := map[string]string{}
	if inf.metadata {
		list, err := meta.Resource(inf.gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, item := range list.Items {
			out[item.Name] = item.ResourceVersion
		}
		return out, nil
	}
	list, err := dyn.Resource(inf.gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, item := range list.Items {
		out[item.GetName()] = item.GetResourceVersion()
	}
	return out, nil
}

func storeContents(store cache.Store) (map[string]string, error) {
	out := map[string]string{}
	for _, obj := range store.List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("a %T in the store: %v", obj, err)
		}
		out[m.GetName()] = m.GetResourceVersion()
	}
	return out, nil
}

// diff says how the store differs from the list, or "".
func diff(list, store map[string]string) string {
	var problems []string
	for name, rv := range list {
		switch got, ok := store[name]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing %s@%s", name, rv))
		case got != rv:
			problems = append(problems, fmt.Sprintf("%s at %s, listed at %s", name, got, rv))
		}
	}
	for name, rv := range store {
		if _, ok := list[name]; !ok {
			problems = append(problems, fmt.Sprintf("extra %s@%s", name, rv))
		}
	}
	sort.Strings(problems)
	if len(problems) > 10 {
		problems = append(problems[:10], fmt.Sprintf("and %d more", len(problems)-10))
	}
	return strings.Join(problems, "; ")
}

func reportInformers(r *run, informers []*informerUnderTest, counter *requestCounter) {
	for _, inf := range informers {
		r.infof("%s: %s; events: %d added, %d updated, %d deleted",
			inf.key, counter.of(inf.key), inf.adds.Load(), inf.updates.Load(), inf.deletes.Load())
	}
}
