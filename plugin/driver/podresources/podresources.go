// Package podresources reads, from the kubelet of the plugin's own node,
// which containers use which ResourceClaims: the kubelet's PodResources
// API (k8s.io/kubelet/pkg/apis/podresources/v1) over its unix socket.
//
// The plugin needs that much of the node's pods and nothing more, so it
// asks the kubelet instead of reading Pods from the API server: a token
// that may read every Pod of the cluster sits on every EFA node otherwise.
// The API lists each container's claims (KEP-3695: DynamicResources,
// beta and on by default since Kubernetes 1.34, GA in 1.36), a claim made
// for a DRA extended resource among them, and answers while a pod's
// claims are being prepared: the kubelet records every claim of a pod
// before it calls a driver, and calls it outside that record's lock.
//
// What it does not tell: a container's request filter (a claim is named,
// not the requests the container takes of it), the pod's UID, the
// containers' environment, and init containers other than sidecars
// (restartable ones).
package podresources

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the API (its root directory's
// pod-resources/kubelet.sock).
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessage is the largest answer read: the kubelet's own client allows
// 16 MiB, for nodes with many pods.
const maxMessage = 16 << 20

// callTimeout bounds one call: the kubelet answers from memory.
const callTimeout = 5 * time.Second

// Pod is one pod the kubelet runs, or is starting, with its containers.
type Pod struct {
	Namespace, Name string
	Containers      []Container
}

// Container is a container of a pod and the claims it uses.
type Container struct {
	Name   string
	Claims []Claim
}

// Claim is a ResourceClaim a container uses, with the devices prepared for
// it so far (none while it is being prepared).
type Claim struct {
	Namespace, Name string
	Devices         []Device
}

// Device is a prepared device of a claim.
type Device struct {
	Driver, Pool, Name string
	CDIDevices         []string
}

// Client asks one kubelet. The connection is made on the first call and
// made again after a failure (the kubelet restarts); a Client is safe for
// concurrent use.
type Client struct {
	socket string
	conn   *grpc.ClientConn
	api    podresourcesv1.PodResourcesListerClient
}

// New returns a client of the kubelet serving the API at socket. It does
// not connect yet.
func New(socket string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources API at %s: %w", socket, err)
	}
	return &Client{socket: socket, conn: conn, api: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// Socket is the socket the client asks.
func (c *Client) Socket() string { return c.socket }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List returns the pods the kubelet knows (the active ones: not finished),
// sorted by namespace and name.
func (c *Client) List(ctx context.Context) ([]Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources API at %s: list: %w", c.socket, err)
	}
	return Pods(resp), nil
}

// Pods converts the API's answer, sorted by namespace and name.
func Pods(resp *podresourcesv1.ListPodResourcesResponse) []Pod {
	out := make([]Pod, 0, len(resp.GetPodResources()))
	for _, pr := range resp.GetPodResources() {
		pod := Pod{Namespace: pr.GetNamespace(), Name: pr.GetName()}
		for _, cr := range pr.GetContainers() {
			ctr := Container{Name: cr.GetName()}
			for _, dr := range cr.GetDynamicResources() {
				cl := Claim{Namespace: dr.GetClaimNamespace(), Name: dr.GetClaimName()}
				for _, res := range dr.GetClaimResources() {
					d := Device{Driver: res.GetDriverName(), Pool: res.GetPoolName(), Name: res.GetDeviceName()}
					for _, cdi := range res.GetCdiDevices() {
						d.CDIDevices = append(d.CDIDevices, cdi.GetName())
					}
					cl.Devices = append(cl.Devices, d)
				}
				ctr.Claims = append(ctr.Claims, cl)
			}
			pod.Containers = append(pod.Containers, ctr)
		}
		out = append(out, pod)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Uses tells whether the container uses the claim.
func (c Container) Uses(namespace, name string) bool {
	for _, cl := range c.Claims {
		if cl.Namespace == namespace && cl.Name == name {
			return true
		}
	}
	return false
}

// Uses tells whether a container of the pod uses the claim.
func (p Pod) Uses(namespace, name string) bool {
	for _, c := range p.Containers {
		if c.Uses(namespace, name) {
			return true
		}
	}
	return false
}

// Using names the pods ("namespace/name") with a container that uses the
// claim, sorted.
func Using(pods []Pod, namespace, name string) []string {
	var out []string
	for _, p := range pods {
		if p.Uses(namespace, name) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}
