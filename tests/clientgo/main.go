// Command clientgo drives storage-transfer-apiserver through client-go, the
// way controllers written in Go use an API: discovery and the REST mapper,
// dynamic and metadata informers (with WatchList on and off, across restarts
// of our server), and server-side apply. tests/client_go.rs builds it with
// hack/build-clientgo.sh and runs one scenario per test against a real
// control plane, through kube-apiserver's aggregator.
//
// Usage:
//
//	clientgo -kubeconfig FILE [-namespace NS] [flags] discovery|informers|apply
//
// Line protocol on stdout, so that the caller can act where client-go cannot:
//
//	RESTART      asks the caller to restart our server; it answers on stdin
//	             with "RESTARTED" once the server is ready again, or
//	             "ERROR <why>".
//	INFO <text>  a finding worth reporting (request and event counts).
//	FAIL <text>  a failed check; the scenario goes on where it can.
//	PASS|FAILED  the verdict, always the last line; the exit code agrees
//	             (0 or 1; 2 for a usage or set-up error).
//
// Everything else, client-go's own log included, goes to stderr.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The API under test.
const (
	group   = "storage.transfer.k8s.io"
	version = "v1alpha1"
)

var (
	transfersGVR = schema.GroupVersionResource{Group: group, Version: version, Resource: "namespacetransfers"}
	claimsGVR    = schema.GroupVersionResource{Group: group, Version: version, Resource: "ephemeralclaims"}
)

// run is one scenario's run: its checks, its log watch and its line to the
// caller.
type run struct {
	namespace string
	config    *rest.Config
	logs      *logWatch

	mu     sync.Mutex
	failed bool
	stdin  *bufio.Reader
}

// failf records a failed check and goes on.
func (r *run) failf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	fmt.Printf("FAIL %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// infof reports a finding.
func (r *run) infof(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Printf("INFO %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// restartServer asks the caller to restart our server and waits until it has.
// The log watch tolerates transport errors meanwhile: a watch that the
// aggregator was proxying when our server died ends with a stream reset.
func (r *run) restartServer() error {
	r.logs.beginRestart()
	defer r.logs.endRestart()
	r.mu.Lock()
	fmt.Println("RESTART")
	r.mu.Unlock()
	line, err := r.stdin.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the caller's answer to RESTART: %w", err)
	}
	line = strings.TrimSpace(line)
	if line != "RESTARTED" {
		return fmt.Errorf("the caller could not restart the server: %s", line)
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the admin kubeconfig of the control plane")
	namespace := flag.String("namespace", "", "an existing namespace the scenario may fill (informers, apply)")
	verbosity := flag.Int("v", 2, "client-go's log verbosity")
	timeout := flag.Duration("timeout", 10*time.Minute, "the whole scenario's deadline")
	restarts := flag.Int("restarts", 2, "informers: how many times to restart our server")
	quiet := flag.Duration("quiet", 70*time.Second, "informers: how long to watch idle informers for re-lists (our server bookmarks an idle watch every 30s)")
	watchList := flag.String("watch-list", "", "informers: on|off, what the WatchListClient feature gate must be (set it with KUBE_FEATURE_WatchListClient)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s -kubeconfig FILE [-namespace NS] [flags] discovery|informers|apply\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *kubeconfig == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	scenario := flag.Arg(0)

	logs := captureKlog(*verbosity, os.Stderr)
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		setupError("loading %s: %v", *kubeconfig, err)
	}
	// Informers and writers share the client-side rate limit: keep it out
	// of the way.
	config.QPS = 100
	config.Burst = 200
	r := &run{namespace: *namespace, config: config, logs: logs, stdin: bufio.NewReader(os.Stdin)}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// A scenario stuck past its deadline must not hang the test.
	deadline := time.AfterFunc(*timeout+30*time.Second, func() {
		r.failf("the scenario did not finish within %s", *timeout)
		fmt.Println("FAILED")
		os.Exit(1)
	})
	defer deadline.Stop()

	switch scenario {
	case "discovery":
		discoveryScenario(ctx, r)
	case "informers":
		if r.namespace == "" {
			setupError("informers needs -namespace")
		}
		informersScenario(ctx, r, informerOptions{restarts: *restarts, quiet: *quiet, watchList: *watchList})
	case "apply":
		if r.namespace == "" {
			setupError("apply needs -namespace")
		}
		applyScenario(ctx, r)
	default:
		setupError("unknown scenario %q: want discovery, informers or apply", scenario)
	}

	for _, line := range logs.fatalLines() {
		r.failf("client-go logged a watch failure: %s", line)
	}
	if n := logs.toleratedCount(); n > 0 {
		r.infof("client-go logged %d watch transport error(s) while our server restarted (tolerated)", n)
	}
	if r.failed {
		fmt.Println("FAILED")
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func setupError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "clientgo: "+format+"\n", args...)
	os.Exit(2)
}
