package doctor

import (
	"fmt"

	"github.com/efakit/efakit/rdmans"
)

// rdmaNetns checks the kernel's RDMA namespace mode. In the exclusive mode
// an RDMA device lives in one network namespace (the host's), so a pod
// never sees the EFA it was given and efakit's plugin publishes nothing.
func (f *facts) rdmaNetns() Check {
	mode, err := f.o.Live.RDMANetnsMode()
	switch {
	case err != nil:
		return Check{ID: CheckRDMANetns, Status: Skip, Message: fmt.Sprintf("the kernel's RDMA namespace mode is unknown: %v", err)}
	case mode == rdmans.Exclusive:
		return Check{ID: CheckRDMANetns, Status: Fail,
			Message: "the kernel's RDMA namespace mode is exclusive: pods do not see their EFAs, and efakit's plugin publishes nothing",
			Fix:     "rdma system set netns shared"}
	}
	return Check{ID: CheckRDMANetns, Status: Pass, Message: fmt.Sprintf("the kernel's RDMA namespace mode is %s", mode)}
}
