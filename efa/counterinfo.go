package efa

// Unit is what one step of a counter is.
type Unit string

// The units of the efa driver's counters.
const (
	UnitBytes    Unit = "bytes"
	UnitPackets  Unit = "packets"
	UnitRequests Unit = "requests" // work requests posted by applications
	UnitCommands Unit = "commands" // admin commands from the driver to the device
	UnitEvents   Unit = "events"   // errors and other occurrences
)

// CounterInfo says what one of the efa driver's hw_counters files counts.
type CounterInfo struct {
	Name string // the file name
	Port bool   // in ports/<n>/hw_counters rather than the device's hw_counters
	Unit Unit
	Help string
}

// NotACounter is the one file of a hw_counters directory that is not a
// counter: the RDMA core's "lifespan", how many milliseconds the core
// keeps the counters it read from the driver before reading them again.
const NotACounter = "lifespan"

// KnownCounters are the counters the upstream efa driver exposes, device
// counters first, in the driver's order. Newer drivers may add more:
// Counters holds whatever files there are.
func KnownCounters() []CounterInfo {
	return []CounterInfo{
		{"submitted_cmds", false, UnitCommands, "Admin commands the driver submitted to the device."},
		{"completed_cmds", false, UnitCommands, "Admin commands the device completed."},
		{"cmds_err", false, UnitCommands, "Admin commands that failed."},
		{"no_completion_cmds", false, UnitCommands, "Admin commands that timed out without a completion."},
		{"keep_alive_rcvd", false, UnitEvents, "Keep-alive events received from the device."},
		{"alloc_pd_err", false, UnitEvents, "Failed protection domain allocations."},
		{"create_qp_err", false, UnitEvents, "Failed queue pair creations."},
		{"create_cq_err", false, UnitEvents, "Failed completion queue creations."},
		{"reg_mr_err", false, UnitEvents, "Failed memory region registrations."},
		{"alloc_ucontext_err", false, UnitEvents, "Failed user context allocations."},
		{"create_ah_err", false, UnitEvents, "Failed address handle creations."},
		{"mmap_err", false, UnitEvents, "Failed mappings of device memory into a process."},

		{"tx_bytes", true, UnitBytes, "Bytes transmitted on the port."},
		{"tx_pkts", true, UnitPackets, "Packets transmitted on the port."},
		{"rx_bytes", true, UnitBytes, "Bytes received on the port."},
		{"rx_pkts", true, UnitPackets, "Packets received on the port."},
		{"rx_drops", true, UnitPackets, "Received packets the device dropped."},
		{"send_bytes", true, UnitBytes, "Bytes sent by send operations."},
		{"send_wrs", true, UnitRequests, "Send work requests."},
		{"recv_bytes", true, UnitBytes, "Bytes received by receive operations."},
		{"recv_wrs", true, UnitRequests, "Receive work requests."},
		{"rdma_read_wrs", true, UnitRequests, "RDMA read work requests."},
		{"rdma_read_bytes", true, UnitBytes, "Bytes read from remote memory by RDMA reads."},
		{"rdma_read_wr_err", true, UnitRequests, "RDMA read work requests that failed."},
		{"rdma_read_resp_bytes", true, UnitBytes, "Bytes sent in answer to remote RDMA reads of local memory."},
		{"rdma_write_wrs", true, UnitRequests, "RDMA write work requests."},
		{"rdma_write_bytes", true, UnitBytes, "Bytes written to remote memory by RDMA writes."},
		{"rdma_write_wr_err", true, UnitRequests, "RDMA write work requests that failed."},
		{"rdma_write_recv_bytes", true, UnitBytes, "Bytes written into local memory by remote RDMA writes."},
		{"retrans_bytes", true, UnitBytes, "Bytes retransmitted."},
		{"retrans_pkts", true, UnitPackets, "Packets retransmitted."},
		{"retrans_timeout_events", true, UnitEvents, "Retransmission timeouts."},
		{"unresponsive_remote_events", true, UnitEvents, "Remote peers found unresponsive."},
		{"impaired_remote_conn_events", true, UnitEvents, "Connections to remote peers found impaired."},
	}
}
