package main

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// restartGrace is how long after our server is back a transport error on a
// watch is still blamed on the restart: the aggregator may answer 503 for a
// moment while it notices that the APIService is available again.
const restartGrace = 15 * time.Second

// logWatch reads every log entry client-go writes and sorts out the ones
// that mean a watch on our resources broke.
type logWatch struct {
	out io.Writer

	mu          sync.Mutex
	restarting  bool
	graceUntil  time.Time
	fatal       []string
	tolerated   int
	partialLine strings.Builder
}

// captureKlog routes klog (and so client-go's reflectors and watch decoders)
// through a text logger that writes to out and to the returned logWatch.
func captureKlog(verbosity int, out io.Writer) *logWatch {
	w := &logWatch{out: out}
	// The legacy klog.V(n) calls check klog's own flag.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(verbosity))
	logger := textlogger.NewLogger(textlogger.NewConfig(
		textlogger.Verbosity(verbosity),
		textlogger.Output(w),
	))
	klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true))
	return w
}

// Write takes whole entries, as the text logger writes them.
func (w *logWatch) Write(p []byte) (int, error) {
	_, _ = w.out.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partialLine.Write(p)
	text := w.partialLine.String()
	end := strings.LastIndexByte(text, '\n')
	if end < 0 {
		return len(p), nil
	}
	w.partialLine.Reset()
	w.partialLine.WriteString(text[end+1:])
	for _, line := range strings.Split(text[:end], "\n") {
		w.check(line)
	}
	return len(p), nil
}

func (w *logWatch) check(line string) {
	switch classify(line) {
	case entryFine:
	case entryBroken:
		w.fatal = append(w.fatal, line)
	case entryTransport:
		if w.restarting || time.Now().Before(w.graceUntil) {
			w.tolerated++
		} else {
			w.fatal = append(w.fatal, line)
		}
	}
}

func (w *logWatch) beginRestart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.restarting = true
}

func (w *logWatch) endRestart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.restarting = false
	w.graceUntil = time.Now().Add(restartGrace)
}

// fatalLines are the entries that fail the run.
func (w *logWatch) fatalLines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.fatal...)
}

// toleratedCount is how many transport errors fell into a restart.
func (w *logWatch) toleratedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tolerated
}

// entryKind is what one log entry says about the watches.
type entryKind int

const (
	// entryFine: nothing wrong with a watch.
	entryFine entryKind = iota
	// entryBroken: a watch event that client-go could not decode or did not
	// expect: always a server bug.
	entryBroken
	// entryTransport: a watch that ended because its connection did: expected
	// while our server restarts, a bug otherwise.
	entryTransport
)

// brokenWatchSigns mark an entry about a watch that ended or lost an event.
var brokenWatchSigns = []string{
	"unable to decode an event from the watch stream",
	"watch ended with error",
	"unable to understand watch event",
	"unexpected watch event object",
	"unsupported watch event object",
}

// transportSigns mark an error of the connection rather than of the
// content: what the aggregator's proxy answers when our server dies
// mid-stream, or what a client sees while it is down.
var transportSigns = []string{
	"stream error: stream id",
	"internal_error; received from peer",
	"connection reset by peer",
	"connection refused",
	"unexpected eof",
	"broken pipe",
	"goaway",
	"use of closed network connection",
	"http2: client connection lost",
	"the server is currently unable to handle the request",
	"service unavailable",
}

// classify sorts one log line. A kind our decoders do not know is always
// broken, whatever else the line says: it is the server's encoding, not the
// network.
func classify(line string) entryKind {
	l := strings.ToLower(line)
	if strings.Contains(l, `no kind "`) {
		return entryBroken
	}
	broken := false
	for _, s := range brokenWatchSigns {
		if strings.Contains(l, s) {
			broken = true
			break
		}
	}
	if !broken {
		return entryFine
	}
	for _, s := range transportSigns {
		if strings.Contains(l, s) {
			return entryTransport
		}
	}
	return entryBroken
}
