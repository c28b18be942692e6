// Command podnet is the real node's pod network, a CNI plugin that changes
// nothing outside the pod: it creates a veth pair with both ends in the
// pod's network namespace, gives the pod's end the next address of a
// counter kept in its dataDir, and answers with a CNI 1.0.0 result. It
// makes the kubelet's node Ready and lets pods that are not hostNetwork
// run; their addresses reach nothing but each other's namespace.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

type netConf struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	DataDir    string `json:"dataDir"`
}

func main() {
	if err := run(); err != nil {
		// A CNI error result: code 100 ("generic") with the message.
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 100, "msg": err.Error()})
		os.Exit(1)
	}
}

func run() error {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "supportedVersions": []string{"0.4.0", "1.0.0", "1.1.0"}})
	case "ADD":
		var conf netConf
		if err := json.Unmarshal(in, &conf); err != nil {
			return fmt.Errorf("network configuration: %w", err)
		}
		return add(conf, os.Getenv("CNI_NETNS"), os.Getenv("CNI_IFNAME"))
	default: // DEL, CHECK, STATUS, GC: the namespace holds all there is.
		return nil
	}
}

func add(conf netConf, nsPath, ifName string) error {
	n, err := next(conf.DataDir)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifName}, PeerName: "peer0"}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth in %s: %w", nsPath, err)
	}
	ip := net.IPv4(10, 88, byte(n/250), byte(n%250+2))
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(16, 32)}}
	link, err := h.LinkByName(ifName)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, addr); err != nil {
		return err
	}
	for _, name := range []string{ifName, "peer0"} {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("%s up: %w", name, err)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"cniVersion": conf.CNIVersion,
		"interfaces": []map[string]any{{"name": ifName, "mac": link.Attrs().HardwareAddr.String(), "sandbox": nsPath}},
		"ips":        []map[string]any{{"address": addr.IPNet.String(), "interface": 0}},
	})
}

// next returns the next number of the counter in dir, under a lock.
func next(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "last"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	n = (n + 1) % 60000
	if _, err := f.WriteAt([]byte(fmt.Sprintf("%d\n", n)), 0); err != nil {
		return 0, err
	}
	return n, nil
}
