// Command csi-mock-driver serves the CSI mock driver that Kubernetes' own e2e
// tests use (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test) on a unix
// socket, for the test harness and `make dev`. hack/build-csi.sh builds it in
// a wrapper module pinned to the Kubernetes release of hack/kube-version.
//
// Every CSI call is appended to --call-log as one JSON line
// {"method","request","response","error"}, so that tests can assert on what
// the driver was asked to do (tests/support's CSI call log reads it). A
// DeleteVolume line also says whether the volume existed when the call came
// ("existed"): the external-provisioner may repeat the call, which CSI
// requires to be idempotent, and only the first one deletes anything.
//
// A CreateVolume whose parameters (the StorageClass's) carry
// "fail-create-volume" fails with ResourceExhausted and that value as its
// message: a volume that cannot be provisioned, as a full backend answers.
// "fail-clone-volume" does the same only to a CreateVolume that clones
// another volume, so that a class can provision volumes but not clone them.
//
// The mock refuses capacities of 1 TiB and more (its MaxStorageCapacity).
// It holds no data, so a capacity is only a number: the wrapper remembers the
// capacity each volume was asked with, by name (CreateVolume's idempotency
// key), passes a request of 1 TiB or more to the mock divided by hugeScale,
// and answers with the capacity asked. A repeated call for a name is answered
// from that record, as CSI requires: the volume if it is large enough,
// AlreadyExists if not. The call log holds the request and answer as the
// provisioner sent and got them.
//
// Volumes live in memory: a restart forgets them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

// failCreateParameter makes CreateVolume fail with its value as the message;
// failCloneParameter, only a CreateVolume from another volume.
const (
	failCreateParameter = "fail-create-volume"
	failCloneParameter  = "fail-clone-volume"
)

// hugeScale divides a capacity the mock would refuse (service.MaxStorageCapacity
// and more) down to one it accepts.
const hugeScale = 1 << 20

type callLog struct {
	mu  sync.Mutex
	out *os.File
	// svc answers whether a volume exists; deletions holds DeleteVolume
	// calls apart, so that the answer stays true until the call is done.
	svc       service.Service
	deletions sync.Mutex
	// made holds the capacity each volume was made with, by name.
	madeMu sync.Mutex
	made   map[string]int64
}

type call struct {
	Method   string      `json:"method"`
	Request  interface{} `json:"request"`
	Response interface{} `json:"response"`
	Error    string      `json:"error"`
	Existed  *bool       `json:"existed,omitempty"`
}

func (l *callLog) record(method string, req, resp interface{}, err error, existed *bool) {
	c := call{Method: method, Request: req, Response: resp, Existed: existed}
	if err != nil {
		c.Error = err.Error()
	}
	line, mErr := json.Marshal(c)
	if mErr != nil {
		line, _ = json.Marshal(call{Method: method, Error: "unloggable: " + mErr.Error()})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// One write per line, synced, so that a reader never sees half a call and
	// a killed driver loses none it answered.
	_, _ = l.out.Write(append(line, '\n'))
	_ = l.out.Sync()
}

func (l *callLog) intercept(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
	if create, ok := req.(*csi.CreateVolumeRequest); ok {
		msg, fail := create.GetParameters()[failCreateParameter]
		if cloneMsg, failClone := create.GetParameters()[failCloneParameter]; failClone && create.GetVolumeContentSource().GetVolume() != nil {
			msg, fail = cloneMsg, true
		}
		if fail {
			err := status.Error(codes.ResourceExhausted, msg)
			l.record(info.FullMethod, req, nil, err, nil)
			return nil, err
		}
		resp, err := l.createHuge(ctx, create, handler)
		l.record(info.FullMethod, req, resp, err, nil)
		return resp, err
	}
	var existed *bool
	if del, ok := req.(*csi.DeleteVolumeRequest); ok {
		l.deletions.Lock()
		defer l.deletions.Unlock()
		_, getErr := l.svc.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: del.GetVolumeId()})
		found := getErr == nil
		existed = &found
	}
	resp, err := handler(ctx, req)
	l.record(info.FullMethod, req, resp, err, existed)
	return resp, err
}

// mockCapacity is what the mock is asked for a volume of capacity c.
func mockCapacity(c int64) int64 {
	if c < service.MaxStorageCapacity {
		return c
	}
	return (c + hugeScale - 1) / hugeScale
}

// createHuge passes a CreateVolume to the mock, asking for mockCapacity of
// the capacity wanted, and answers with the capacity wanted; the request
// logged is the one given.
func (l *callLog) createHuge(ctx context.Context, req *csi.CreateVolumeRequest, handler grpc.UnaryHandler) (interface{}, error) {
	// The mock's own rule: the limit, if any, else the request.
	wanted := req.GetCapacityRange().GetRequiredBytes()
	if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 {
		wanted = limit
	}
	l.madeMu.Lock()
	defer l.madeMu.Unlock()
	if before, ok := l.made[req.GetName()]; ok {
		if before < req.GetCapacityRange().GetRequiredBytes() {
			return nil, status.Errorf(codes.AlreadyExists, "Volume with name %s already exists", req.GetName())
		}
		wanted = before
	}
	asked := *req
	if wanted > 0 {
		asked.CapacityRange = &csi.CapacityRange{RequiredBytes: mockCapacity(wanted)}
	}
	resp, err := handler(ctx, &asked)
	if err != nil {
		return resp, err
	}
	created := resp.(*csi.CreateVolumeResponse)
	volume := *created.GetVolume()
	if wanted > 0 {
		volume.CapacityBytes = wanted
	}
	l.made[req.GetName()] = volume.CapacityBytes
	return &csi.CreateVolumeResponse{Volume: &volume}, nil
}

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve on, as unix:///path or /path")
	name := flag.String("driver-name", "csi-mock.storage.transfer.k8s.io", "the CSI driver name (a StorageClass's provisioner)")
	logPath := flag.String("call-log", "", "file every CSI call is appended to, one JSON line each")
	klog.InitFlags(nil)
	flag.Parse()

	if *endpoint == "" || *logPath == "" {
		fmt.Fprintln(os.Stderr, "csi-mock-driver: --endpoint and --call-log are required")
		os.Exit(2)
	}
	socket := strings.TrimPrefix(*endpoint, "unix://")
	out, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock-driver: --call-log: %v\n", err)
		os.Exit(1)
	}
	svc := service.New(service.Config{DisableAttach: true, DriverName: *name})
	log := &callLog{out: out, svc: svc, made: map[string]int64{}}
	d := driver.NewCSIDriver(&driver.CSIDriverServers{Controller: svc, Identity: svc, Node: svc})

	// A socket left by a killed driver would make Listen fail.
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock-driver: --endpoint: %v\n", err)
		os.Exit(1)
	}
	if err := d.Start(l, log.intercept); err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock-driver: %v\n", err)
		os.Exit(1)
	}
	klog.Infof("csi-mock-driver %s serving on %s, calls logged to %s", *name, socket, *logPath)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	d.Stop()
	_ = os.Remove(socket)
}
