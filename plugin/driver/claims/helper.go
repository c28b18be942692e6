package claims

import "path/filepath"

// What efakit relies on in the kubelet-plugin helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin, v0.37.2 as go.mod
// pins it) that the helper does not export: its file names and layouts.
// They are all here, and TestHelperInternals reads the pinned helper's
// source and fails when one of them changes. Package cdi holds the two
// that name CDI specs (cdi.MetadataClass, cdi.Writer.MetadataSpecPath:
// "<driver>_metadata_<claim UID>_<request>.json"), since it writes them;
// the same test checks them.

// lockFileName is the helper's lock file in the plugin's data directory:
// with rolling updates it holds it around every prepare and unprepare call
// (etcd's fileutil.LockFile), and the old and the new plugin pod share it.
const lockFileName = "serialize.lock"

// metadataDirName is where the helper keeps device-metadata files in the
// data directory: <ns>_<claim>/<request>/metadata.json.
const metadataDirName = "dra-device-metadata"

// metadataClaimDir is a claim's directory under metadataDirName.
func metadataClaimDir(namespace, name string) string { return namespace + "_" + name }

// metadataFile is the helper's device-metadata file of one request of a
// claim, in the data directory.
func metadataFile(dataDir, namespace, name, request string) string {
	return filepath.Join(dataDir, metadataDirName, metadataClaimDir(namespace, name), request, "metadata.json")
}

// SocketPatterns are the sockets of this driver that the helper makes:
// registration sockets in the kubelet's registry directory
// (<driver>-reg.sock, <driver>-<pod UID or hash>-reg.sock with rolling
// updates; its shortest form, dra-<hash>-reg.sock, names no driver and is
// not listed), and DRA sockets in the plugin's own directory (dra.sock,
// dra-<pod UID>.sock).
func SocketPatterns(registrar, dataDir, driverName string) []string {
	return []string{
		filepath.Join(registrar, driverName+"-reg.sock"),
		filepath.Join(registrar, driverName+"-*-reg.sock"),
		filepath.Join(dataDir, "dra.sock"),
		filepath.Join(dataDir, "dra-*.sock"),
	}
}
