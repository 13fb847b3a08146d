package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// requestCounts is what one informer asked of the server.
type requestCounts struct {
	// Lists: LIST requests (first pages only), and how many of those succeeded.
	lists, listsOK int
	// WatchLists: watches with sendInitialEvents=true (the WatchList
	// feature's streaming list), and how many of them the server accepted.
	watchLists, watchListsOK int
	// Watches: plain watches, from a resourceVersion.
	watches, watchesOK int
	// Watching: the last successful request was a watch or watch-list,
	// whose stream is (as far as we know) still open.
	watching bool
}

// minus is what was asked between an earlier snapshot and c.
func (c requestCounts) minus(earlier requestCounts) requestCounts {
	return requestCounts{
		lists: c.lists - earlier.lists, listsOK: c.listsOK - earlier.listsOK,
		watchLists: c.watchLists - earlier.watchLists, watchListsOK: c.watchListsOK - earlier.watchListsOK,
		watches: c.watches - earlier.watches, watchesOK: c.watchesOK - earlier.watchesOK,
	}
}

func (c requestCounts) String() string {
	return fmt.Sprintf("lists=%d (ok %d) watch-lists=%d (ok %d) watches=%d (ok %d)",
		c.lists, c.listsOK, c.watchLists, c.watchListsOK, c.watches, c.watchesOK)
}

// requestCounter counts the collection requests an informer's client makes,
// by client ("dynamic", or "metadata" when it asks for
// PartialObjectMetadata) and resource, e.g. "metadata/namespacetransfers".
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]requestCounts
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[string]requestCounts{}}
}

// wrap is a rest.Config WrapTransport.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		key, kind := classifyRequest(req)
		resp, err := next.RoundTrip(req)
		if key != "" {
			ok := err == nil && resp.StatusCode/100 == 2
			c.mu.Lock()
			n := c.counts[key]
			switch kind {
			case "list":
				n.lists++
				if ok {
					n.listsOK++
				}
			case "watch-list":
				n.watchLists++
				if ok {
					n.watchListsOK++
				}
			case "watch":
				n.watches++
				if ok {
					n.watchesOK++
				}
			}
			if ok {
				n.watching = kind != "list"
			}
			c.counts[key] = n
			c.mu.Unlock()
			if ok && kind != "list" {
				resp.Body = &onClose{ReadCloser: resp.Body, closed: func() { c.closed(key) }}
			}
		}
		return resp, err
	})
}

// closed notes that a watch stream of key ended.
func (c *requestCounter) closed(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counts[key]
	n.watching = false
	c.counts[key] = n
}

// onClose calls closed once, when the body is closed.
type onClose struct {
	io.ReadCloser
	once   sync.Once
	closed func()
}

func (o *onClose) Close() error {
	o.once.Do(o.closed)
	return o.ReadCloser.Close()
}

// of is a snapshot of one client's counts.
func (c *requestCounter) of(key string) requestCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// classifyRequest names a collection GET on one of our resources: its
// counter key and whether it is a list, a watch-list or a watch. Other
// requests get "".
func classifyRequest(req *http.Request) (key, kind string) {
	if req.Method != http.MethodGet {
		return "", ""
	}
	segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	resource := segments[len(segments)-1]
	if resource != transfersGVR.Resource && resource != claimsGVR.Resource {
		return "", ""
	}
	client := "dynamic"
	if strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
		client = "metadata"
	}
	q := req.URL.Query()
	switch {
	case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
		kind = "watch-list"
	case q.Get("watch") == "true":
		kind = "watch"
	case q.Get("continue") != "":
		return "", "" // a later page of the same list
	default:
		kind = "list"
	}
	return client + "/" + resource, kind
}
