package metrics

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/efa"
)

// Defaults of EFA.
const (
	// DefaultEFATimeout bounds a scrape's wait for sysfs.
	DefaultEFATimeout = 2 * time.Second
	// DefaultEFACacheFor is shorter than the common 15 s scrape
	// interval, so one scraper always gets a fresh read, and the two
	// Prometheus servers of an HA pair share one.
	DefaultEFACacheFor = 10 * time.Second
)

// efaLabels are the labels of every EFA series, in this order: the RDMA
// device (as node_exporter's infiniband collector names it), its PCI
// function and root (the published pcieRoot), the published device, and
// the claim it is prepared for ("" when free).
var efaLabels = []string{"device", "pci_address", "pcie_root", "dra_device", "claim_namespace", "claim_name", "claim_uid"}

// EFA exports the EFAs' hardware counters, port state and link rate
// in the plugin's /metrics, each EFA labelled with the claim it is
// prepared for. Sysfs is read on scrape, not in a background loop, at most
// once per CacheFor, and a scrape never waits longer than Timeout: sysfs
// reads cannot be cancelled, so they run in goroutines and a scrape stops
// waiting, leaving out the EFAs not read yet; an EFA whose read has not
// returned is not read again until it does.
type EFA struct {
	// Timeout bounds how long a scrape waits for the reads.
	Timeout time.Duration
	// CacheFor is how long one read serves scrapes; 0 reads on every one.
	CacheFor time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	sysfs   fs.ReadLinkFS
	targets func() []Target

	descs descs
	fails fails

	mu      sync.Mutex
	last    *efaSample
	round   *efaRound
	pending map[string]bool   // PCI addresses of EFAs whose read has not returned
	lastErr map[string]string // by RDMA device: the errors last logged
}

// fails count the exporter's own failures.
type fails struct {
	reads    *prometheus.CounterVec // efakit_efa_read_errors_total{device}
	timeouts prometheus.Counter     // efakit_efa_read_timeouts_total
}

// descs are the descriptions of the EFA series.
type descs struct {
	counters    map[string]*prometheus.Desc // by counter file name
	otherDevice *prometheus.Desc
	otherPort   *prometheus.Desc
	portActive  *prometheus.Desc
	portRate    *prometheus.Desc
}

// Target is one EFA to read and what its series are labelled with.
type Target struct {
	Dev *efa.Device
	// Device is the RDMA device, PCIAddress the PCI function, PCIeRoot
	// its root, DRADevice the published device.
	Device, PCIAddress, PCIeRoot, DRADevice string
	// The claim the EFA is prepared for, "" when it is free.
	ClaimNamespace, ClaimName, ClaimUID string
}

// labelValues are the target's values of efaLabels, in their order.
func (t Target) labelValues() []string {
	return []string{t.Device, t.PCIAddress, t.PCIeRoot, t.DRADevice, t.ClaimNamespace, t.ClaimName, t.ClaimUID}
}

type efaSample struct {
	at time.Time
	// key says which EFAs were read, labelled how (targetsKey): a sample
	// serves only while the targets are the same.
	key     string
	metrics []prometheus.Metric
	// counters are each EFA's counters as read, by PCI address; an EFA
	// whose read did not return in time is absent.
	counters map[string]*efa.Counters
}

// efaRound is one read in progress; every scrape that arrives meanwhile
// waits for it instead of reading again.
type efaRound struct {
	done   chan struct{}
	sample *efaSample
}

// efaReading is what was read of one EFA.
type efaReading struct {
	t        Target
	counters *efa.Counters
	ports    []portReading
	errs     []error
}

type portReading struct {
	number   int
	state    string
	stateOK  bool
	rateGbps float64
	rateOK   bool
}

// efaMetricName is the Prometheus name of a counter of efa.KnownCounters,
// "" for one it does not know. Per-port counters carry a port label.
func efaMetricName(counter string) string {
	return map[string]string{
		"submitted_cmds":              "efakit_efa_admin_commands_submitted_total",
		"completed_cmds":              "efakit_efa_admin_commands_completed_total",
		"cmds_err":                    "efakit_efa_admin_commands_failed_total",
		"no_completion_cmds":          "efakit_efa_admin_commands_timed_out_total",
		"keep_alive_rcvd":             "efakit_efa_keep_alive_received_total",
		"alloc_pd_err":                "efakit_efa_alloc_pd_errors_total",
		"create_qp_err":               "efakit_efa_create_qp_errors_total",
		"create_cq_err":               "efakit_efa_create_cq_errors_total",
		"reg_mr_err":                  "efakit_efa_reg_mr_errors_total",
		"alloc_ucontext_err":          "efakit_efa_alloc_ucontext_errors_total",
		"create_ah_err":               "efakit_efa_create_ah_errors_total",
		"mmap_err":                    "efakit_efa_mmap_errors_total",
		"tx_bytes":                    "efakit_efa_tx_bytes_total",
		"tx_pkts":                     "efakit_efa_tx_packets_total",
		"rx_bytes":                    "efakit_efa_rx_bytes_total",
		"rx_pkts":                     "efakit_efa_rx_packets_total",
		"rx_drops":                    "efakit_efa_rx_dropped_packets_total",
		"send_bytes":                  "efakit_efa_send_bytes_total",
		"send_wrs":                    "efakit_efa_send_work_requests_total",
		"recv_bytes":                  "efakit_efa_recv_bytes_total",
		"recv_wrs":                    "efakit_efa_recv_work_requests_total",
		"rdma_read_wrs":               "efakit_efa_rdma_read_work_requests_total",
		"rdma_read_bytes":             "efakit_efa_rdma_read_bytes_total",
		"rdma_read_wr_err":            "efakit_efa_rdma_read_work_request_errors_total",
		"rdma_read_resp_bytes":        "efakit_efa_rdma_read_response_bytes_total",
		"rdma_write_wrs":              "efakit_efa_rdma_write_work_requests_total",
		"rdma_write_bytes":            "efakit_efa_rdma_write_bytes_total",
		"rdma_write_wr_err":           "efakit_efa_rdma_write_work_request_errors_total",
		"rdma_write_recv_bytes":       "efakit_efa_rdma_write_received_bytes_total",
		"retrans_bytes":               "efakit_efa_retransmitted_bytes_total",
		"retrans_pkts":                "efakit_efa_retransmitted_packets_total",
		"retrans_timeout_events":      "efakit_efa_retransmit_timeouts_total",
		"unresponsive_remote_events":  "efakit_efa_unresponsive_remote_events_total",
		"impaired_remote_conn_events": "efakit_efa_impaired_remote_connection_events_total",
	}[counter]
}

// NewEFA reads fsys for the EFAs targets lists.
func NewEFA(fsys fs.ReadLinkFS, targets func() []Target) *EFA {
	portLabels := append(slices.Clone(efaLabels), "port")
	m := &EFA{
		Timeout: DefaultEFATimeout, CacheFor: DefaultEFACacheFor,
		sysfs: fsys, targets: targets,
		descs: descs{counters: map[string]*prometheus.Desc{},
			otherDevice: prometheus.NewDesc("efakit_efa_other_total",
				"A device counter of hw_counters that efakit does not know (a newer efa driver), by file name.",
				append(slices.Clone(efaLabels), "counter"), nil),
			otherPort: prometheus.NewDesc("efakit_efa_port_other_total",
				"A port counter of ports/<n>/hw_counters that efakit does not know (a newer efa driver), by file name.",
				append(slices.Clone(portLabels), "counter"), nil),
			portActive: prometheus.NewDesc("efakit_efa_port_active",
				"1 when the port's state is ACTIVE, else 0 (ports/<n>/state).", portLabels, nil),
			portRate: prometheus.NewDesc("efakit_efa_port_rate_bytes_per_second",
				"The port's link rate (ports/<n>/rate).", portLabels, nil)},
		fails: fails{reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efakit_efa_read_errors_total",
			Help: "Files of an EFA (counters, port state, rate) that could not be read or parsed; their series are left out.",
		}, []string{"device"}),
			timeouts: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "efakit_efa_read_timeouts_total",
				Help: "Scrapes that stopped waiting for sysfs (or the plugin's state) at the bound; the EFAs not read were left out.",
			})},
		pending: map[string]bool{},
		lastErr: map[string]string{},
	}
	for _, c := range efa.KnownCounters() {
		name := efaMetricName(c.Name)
		if name == "" {
			continue // exported as an other counter
		}
		labels := efaLabels
		file := "hw_counters/" + c.Name
		if c.Port {
			labels, file = portLabels, "ports/<n>/hw_counters/"+c.Name
		}
		m.descs.counters[c.Name] = prometheus.NewDesc(name, fmt.Sprintf("%s (%s, %s)", c.Help, file, c.Unit), labels, nil)
	}
	return m
}

// Describe sends every metric's description.
func (m *EFA) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs.counters {
		ch <- d
	}
	ch <- m.descs.otherDevice
	ch <- m.descs.otherPort
	ch <- m.descs.portActive
	ch <- m.descs.portRate
	m.fails.reads.Describe(ch)
	m.fails.timeouts.Describe(ch)
}

// Collect sends the EFAs' metrics: the last read if it is younger than
// CacheFor, else a new one, waited for at most Timeout.
func (m *EFA) Collect(ch chan<- prometheus.Metric) {
	for _, x := range m.sample(m.CacheFor).metrics {
		ch <- x
	}
	m.fails.reads.Collect(ch)
	m.fails.timeouts.Collect(ch)
}

// Counters are the EFAs' counters by PCI address, from the same reads the
// scrapes get: the last one if younger than maxAge (and CacheFor), else a
// new one, waited for at most Timeout. An EFA whose read has not returned
// (a hung device: reading hw_counters asks the device) is absent, so the
// health checks that read them wait no longer than a scrape. The caller
// must not change them.
func (m *EFA) Counters(maxAge time.Duration) map[string]*efa.Counters {
	return m.sample(min(maxAge, m.CacheFor)).counters
}

func (m *EFA) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *EFA) sample(maxAge time.Duration) *efaSample {
	targets := m.targets()
	key := targetsKey(targets)
	m.mu.Lock()
	if m.last != nil && m.last.key == key && m.now().Sub(m.last.at) < maxAge {
		s := m.last
		m.mu.Unlock()
		return s
	}
	r := m.round
	if r == nil {
		r = &efaRound{done: make(chan struct{})}
		m.round = r
		go m.run(r, targets, key, m.Timeout)
	}
	m.mu.Unlock()
	<-r.done // run ends within the timeout
	return r.sample
}

// targetsKey names a set of targets with their labels.
func targetsKey(ts []Target) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%s|%s|%s|%s|%s|%s|%s;", t.Device, t.PCIAddress, t.PCIeRoot, t.DRADevice, t.ClaimNamespace, t.ClaimName, t.ClaimUID)
	}
	return b.String()
}

// run reads every EFA of targets, each in its own goroutine, and keeps
// what was read within timeout as the new sample. The targets come from
// the plugin's snapshot and committed claim state, which no prepare
// holds: reading them never waits.
func (m *EFA) run(r *efaRound, targets []Target, key string, timeout time.Duration) {
	logger := klog.Background()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	timedOut := false

	results := make(chan efaReading, len(targets)) // late reads never block
	var stuck []string
	started := 0
	m.mu.Lock()
	for _, t := range targets {
		addr := t.PCIAddress
		if m.pending[addr] {
			stuck = append(stuck, t.Device)
			continue
		}
		m.pending[addr] = true
		started++
		go func() {
			rd := m.read(t)
			m.mu.Lock()
			delete(m.pending, addr)
			m.mu.Unlock()
			results <- rd
		}()
	}
	m.mu.Unlock()

	got := map[string]efaReading{}
wait:
	for len(got) < started {
		select {
		case rd := <-results:
			got[rd.t.PCIAddress] = rd
		case <-deadline.C:
			timedOut = true
			break wait
		}
	}
	var late []string
	var out []prometheus.Metric
	counters := make(map[string]*efa.Counters, len(got))
	for _, t := range targets {
		rd, ok := got[t.PCIAddress]
		if !ok {
			if !slices.Contains(stuck, t.Device) {
				late = append(late, t.Device)
			}
			continue
		}
		if rd.counters != nil {
			counters[t.PCIAddress] = rd.counters
		}
		out = append(out, m.metricsOf(rd)...)
		m.noteErrors(logger, rd)
	}
	if timedOut || len(stuck) > 0 {
		m.fails.timeouts.Inc()
		logger.Error(nil, "EFA metrics timed out reading sysfs", "then", "the EFAs not read are left out of this scrape",
			"timeout", timeout, "late", late, "stillReadingFromBefore", stuck)
	}

	s := &efaSample{at: m.now(), key: key, metrics: out, counters: counters}
	m.mu.Lock()
	m.last, m.round, r.sample = s, nil, s
	m.mu.Unlock()
	close(r.done)
}
