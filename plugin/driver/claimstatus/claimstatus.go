// Package claimstatus writes what the plugin prepared into each claim's
// status.devices (KEP-4817, DRAResourceClaimDeviceStatus: beta since
// Kubernetes 1.33, GA in 1.37), so that `kubectl get resourceclaim -o
// yaml` says which EFA a claim got and whether it is healthy now, without
// the plugin's log or /metrics.
//
// Each entry is written by server-side apply under one field manager,
// with the claim's UID as a precondition: the apply names only this
// driver's entries of this node's pool, so the scheduler's fields and
// other drivers' entries are never touched, and an entry this manager no
// longer applies is removed by the API server. Writes happen on a worker
// goroutine (Run), never on the kubelet's prepare path: Set only records
// what is wanted. A write that fails for a reason that may pass (the API
// server away, a timeout, throttling) is retried with a back-off, at most
// MaxRetries times; one that cannot succeed (the claim is gone or was
// made anew, it was deallocated, the token may not write) is dropped.
// Where the API server refuses the write for want of a permission, or
// drops the field (the feature off), it is said once and the plugin goes
// on preparing claims.
//
// Nothing is removed at unprepare: the API server drops a claim's
// status.devices when the claim is deallocated, which the claim
// controller does as soon as its last pod is gone; until then the entries
// say what the claim was prepared with.
package claimstatus

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the field manager of every apply: the entries it owns
// are the plugin's, whichever of a rolling update's pods wrote them.
const FieldManager = "efakit-plugin"

// MaxRetries bounds the retries of one claim's write after a failure that
// may pass; the next change of the claim (a health change) tries again.
const MaxRetries = 5

// The condition types of an entry.
const (
	// TypeReady is True once the device is prepared: its CDI spec is
	// written and the claim recorded in the checkpoint.
	TypeReady = "Ready"
	// TypeHealthy says whether the device is healthy now, kept current by
	// the plugin's health checks (every --health-interval).
	TypeHealthy = "Healthy"
)

// Condition is one condition of an entry, without its transition time
// (the Writer keeps it across writes while the status stays the same).
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string // CamelCase, as the API wants it
	Message string
}

// Device is the entry of one allocated device: its key in the claim's
// allocation (this driver and node's pool are the Writer's), its
// conditions, and data marshalled as JSON.
type Device struct {
	Device, ShareID string
	Conditions      []Condition
	Data            any
}

// Claim is a claim the plugin prepared, with the entries it wants.
type Claim struct {
	Namespace, Name string
	UID             types.UID
	Devices         []Device
}

// Outcome is the result of one write, as counted by Options.Observe.
type Outcome string

// The outcomes of a write.
const (
	Written   Outcome = "written"   // applied (or nothing had changed)
	Retried   Outcome = "retry"     // failed for a reason that may pass; tried again later
	Gone      Outcome = "gone"      // the claim is gone, made anew, or no longer allocated these devices
	Forbidden Outcome = "forbidden" // the token may not write the claim's status
	Dropped   Outcome = "dropped"   // the API server keeps no status.devices
	Failed    Outcome = "failed"    // refused, or retried MaxRetries times
)

// Options are what New needs.
type Options struct {
	Client kubernetes.Interface
	// DriverName and Pool key every entry (the node's name is its pool).
	DriverName, Pool string
	// Observe counts each write's outcome (nil: not counted).
	Observe func(Outcome)
	// Backoff is the first retry's delay, doubled each time up to 30 s
	// (500 ms when 0).
	Backoff time.Duration
	// Now is the clock of transition times (time.Now when nil).
	Now func() time.Time
}

// EFAData is the data of an EFA's entry (status.devices[].data), what a
// user looks for when a claim's container cannot reach its EFA: which RDMA
// device and uverbs node it is, its PCI function, its port's GID, rate
// and state as the last scan read them, and how the container gets it
// (the request and its CDI device). A group device's entry has the request
// and CDI device, and its members, each an EFA's fields.
type EFAData struct {
	RDMADevice   string `json:"rdmaDevice,omitempty"`   // rdmap79s0
	UverbsDevice string `json:"uverbsDevice,omitempty"` // uverbs3
	UverbsNode   string `json:"uverbsNode,omitempty"`   // /dev/infiniband/uverbs3
	DeviceNumber string `json:"deviceNumber,omitempty"` // 231:195
	PCIAddress   string `json:"pciAddress,omitempty"`   // 0000:4f:00.0
	// The port, flattened into the same JSON object.
	PortData
	// Request is the claim's request the device was allocated for, and
	// CDIDevice the CDI device the container gets it through.
	Request   string `json:"request,omitempty"`
	CDIDevice string `json:"cdiDevice,omitempty"`
	// Shares is how many shares of an EFA shared by capacity the claim
	// holds (the allocation's consumedCapacity).
	Shares  int64     `json:"shares,omitempty"`
	Members []EFAData `json:"members,omitempty"`
	// GPUDirect is whether GPUDirect RDMA can work between the EFA and
	// each GPU it is closest to, as the last scan judged it.
	GPUDirect []GPUDirectData `json:"gpuDirect,omitempty"`
}

// PortData is an EFA's port as the last scan read it.
type PortData struct {
	GID          string  `json:"gid,omitempty"` // the port's GID 0
	LinkRateGbps float64 `json:"linkRateGbps,omitempty"`
	PortState    string  `json:"portState,omitempty"` // ACTIVE, DOWN, ...
}

// GPUDirectData is one GPU-EFA pair's GPUDirect readiness (efakit's
// gpudirect package; efakit topo prints every finding with its source).
type GPUDirectData struct {
	GPU    string `json:"gpu"`    // the GPU's PCI address
	Link   string `json:"link"`   // PXB, PHB, NODE...
	Status string `json:"status"` // ready, slow, unknown or blocked
	// ReadyBy are the paths that work: dma-buf, peer-memory.
	ReadyBy []string `json:"readyBy,omitempty"`
	// NotReady are the checks that keep a path from ready, with their
	// status: "dma-buf nvidia-topology-check: blocked".
	NotReady []string `json:"notReady,omitempty"`
	// NCCL is what NCCL does with the pair by default: within its
	// GPUDirect RDMA level, ready by aws-ofi-nccl's topology file for the
	// instance type (named), or staged through the host unless
	// NCCL_NET_GDR_LEVEL allows it.
	NCCL string `json:"nccl,omitempty"`
}
