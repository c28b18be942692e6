// Package claimenv decides the environment variables a prepared claim's
// CDI devices set (the libfabric environment, env: libfabric in the
// claim's or class's EFAConfig) and refuses a claim whose containers
// would get it wrong. It decides on what a kubelet call hands it (the
// claims prepared already, the call's claims, the kubelet's pods) and
// reads nothing itself: driver/claims makes the reads before it takes its
// lock.
//
// A request whose configuration says env: libfabric gets FI_PROVIDER=efa
// and FI_EFA_IFACE naming its EFAs. CDI replaces a variable by name, so a
// container that takes EFAs from that request and from any other (another
// request or claim) would end with FI_EFA_IFACE naming only some of its
// EFAs, whichever device the runtime applied last: libfabric would use a
// subset, silently. So the containers that use the claim are read from
// the kubelet (its PodResources API: which containers of the node's pods
// use which claims), and the claim is refused where one of them mixes
// such a request with other EFAs. The kubelet names the claims a
// container uses, not the requests it takes of them: a container that
// uses a claim is taken to get every request of it that holds this node's
// EFAs.
//
// The same check runs for a claim without the environment when another
// claim (in this call or prepared already) has it, since the mix is wrong
// whichever of the two is prepared second. With no libfabric environment
// anywhere, the kubelet is not asked.
package claimenv
