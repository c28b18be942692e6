package efa

// The units of the efa driver's counters (CounterInfo.Unit).
const (
	unitBytes    = "bytes"
	unitPackets  = "packets"
	unitRequests = "requests" // work requests posted by applications
	unitCommands = "commands" // admin commands from the driver to the device
	unitEvents   = "events"   // errors and other occurrences
)

// CounterInfo says what one of the efa driver's hw_counters files counts.
type CounterInfo struct {
	Name string // the file name
	Port bool   // in ports/<n>/hw_counters rather than the device's hw_counters
	// Unit is what one step counts: "bytes", "packets", "requests" (work
	// requests posted by applications), "commands" (admin commands from
	// the driver to the device) or "events" (errors and other occurrences).
	Unit string
	Help string
}

// notACounter is the one file of a hw_counters directory that is not a
// counter: the RDMA core's "lifespan", how many milliseconds the core
// keeps the counters it read from the driver before reading them again.
const notACounter = "lifespan"

// KnownCounters are the counters the upstream efa driver exposes, device
// counters first, in the driver's order. Newer drivers may add more:
// Counters holds whatever files there are.
func KnownCounters() []CounterInfo {
	return []CounterInfo{
		{"submitted_cmds", false, unitCommands, "Admin commands the driver submitted to the device."},
		{"completed_cmds", false, unitCommands, "Admin commands the device completed."},
		{"cmds_err", false, unitCommands, "Admin commands that failed."},
		{"no_completion_cmds", false, unitCommands, "Admin commands that timed out without a completion."},
		{"keep_alive_rcvd", false, unitEvents, "Keep-alive events received from the device."},
		{"alloc_pd_err", false, unitEvents, "Failed protection domain allocations."},
		{"create_qp_err", false, unitEvents, "Failed queue pair creations."},
		{"create_cq_err", false, unitEvents, "Failed completion queue creations."},
		{"reg_mr_err", false, unitEvents, "Failed memory region registrations."},
		{"alloc_ucontext_err", false, unitEvents, "Failed user context allocations."},
		{"create_ah_err", false, unitEvents, "Failed address handle creations."},
		{"mmap_err", false, unitEvents, "Failed mappings of device memory into a process."},

		{"tx_bytes", true, unitBytes, "Bytes transmitted on the port."},
		{"tx_pkts", true, unitPackets, "Packets transmitted on the port."},
		{"rx_bytes", true, unitBytes, "Bytes received on the port."},
		{"rx_pkts", true, unitPackets, "Packets received on the port."},
		{"rx_drops", true, unitPackets, "Received packets the device dropped."},
		{"send_bytes", true, unitBytes, "Bytes sent by send operations."},
		{"send_wrs", true, unitRequests, "Send work requests."},
		{"recv_bytes", true, unitBytes, "Bytes received by receive operations."},
		{"recv_wrs", true, unitRequests, "Receive work requests."},
		{"rdma_read_wrs", true, unitRequests, "RDMA read work requests."},
		{"rdma_read_bytes", true, unitBytes, "Bytes read from remote memory by RDMA reads."},
		{"rdma_read_wr_err", true, unitRequests, "RDMA read work requests that failed."},
		{"rdma_read_resp_bytes", true, unitBytes, "Bytes sent in answer to remote RDMA reads of local memory."},
		{"rdma_write_wrs", true, unitRequests, "RDMA write work requests."},
		{"rdma_write_bytes", true, unitBytes, "Bytes written to remote memory by RDMA writes."},
		{"rdma_write_wr_err", true, unitRequests, "RDMA write work requests that failed."},
		{"rdma_write_recv_bytes", true, unitBytes, "Bytes written into local memory by remote RDMA writes."},
		{"retrans_bytes", true, unitBytes, "Bytes retransmitted."},
		{"retrans_pkts", true, unitPackets, "Packets retransmitted."},
		{"retrans_timeout_events", true, unitEvents, "Retransmission timeouts."},
		{"unresponsive_remote_events", true, unitEvents, "Remote peers found unresponsive."},
		{"impaired_remote_conn_events", true, unitEvents, "Connections to remote peers found impaired."},
	}
}
