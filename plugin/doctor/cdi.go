package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/efakit/efakit/internal/fserr"
	"github.com/efakit/efakit/plugin/cdi"
)

// cdi checks the CDI spec directory the runtime reads: that it is there,
// and that every spec in it loads with the CDI library as the runtime's
// cache loads it (a spec that does not load gives the runtime none of its
// devices; two specs that define one device give it neither).
func (f *facts) cdi() Check {
	dir := f.o.CDIRoot
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && f.o.Place == InPod:
		return Check{ID: CheckCDI, Status: Skip, Message: fmt.Sprintf("in a pod: the CDI spec directory %s is the node's, not mounted here", dir)}
	case errors.Is(err, fs.ErrNotExist):
		return Check{ID: CheckCDI, Status: Warn, Message: fmt.Sprintf("the CDI spec directory %s does not exist", dir),
			Fix: "enable CDI in the runtime with this directory among its spec directories (containerd: enable_cdi = true, cdi_spec_dirs), " +
				"and run efakit's plugin with --cdi-root there (it creates the directory on its first prepare)"}
	case err != nil:
		return Check{ID: CheckCDI, Status: Fail, Message: err.Error(), Fix: "check --cdi-root, and run as root"}
	case !fi.IsDir():
		return Check{ID: CheckCDI, Status: Fail, Message: fmt.Sprintf("%s is %s, not a directory", dir, fserr.TypeName(fi.Mode())), Fix: "remove it: the runtime reads CDI specs from a directory there"}
	}

	ents, err := os.ReadDir(dir)
	if err != nil {
		return Check{ID: CheckCDI, Status: Fail, Message: err.Error(), Fix: "check --cdi-root, and run as root"}
	}
	specs := 0
	for _, e := range ents {
		// What the CDI cache reads: files ending in .json or .yaml.
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".json" || ext == ".yaml") {
			specs++
		}
	}
	// The driver's own files, sorted as the plugin sorts them.
	var own cdi.Files
	if w, err := cdi.NewWriter(dir, f.o.DriverName); err == nil {
		own, _ = w.List()
	}
	metadataSpecs := 0
	for _, names := range own.Metadata {
		metadataSpecs += len(names)
	}
	summary := fmt.Sprintf("%s in %s (%d %s-%s_*.json, %d %s_%s_*.json)", plural(specs, "spec file"), dir,
		len(own.Specs), f.o.DriverName, cdi.Class, metadataSpecs, f.o.DriverName, cdi.MetadataClass)

	// No watch: one scan, as a runtime's cache makes on start.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return Check{ID: CheckCDI, Status: Fail, Message: fmt.Sprintf("%s; the CDI library cannot read the directory: %v", summary, err), Fix: "check --cdi-root"}
	}
	var broken []string
	for path, errs := range cache.GetErrors() {
		if len(errs) == 0 {
			continue
		}
		// The library's messages can span lines; the first one is enough
		// to say what is wrong with the file.
		msg, _, _ := strings.Cut(errs[0].Error(), "\n")
		broken = append(broken, fmt.Sprintf("%s (%s)", filepath.Base(path), msg))
	}
	slices.Sort(broken)
	if len(broken) > 0 {
		return Check{ID: CheckCDI, Status: Fail,
			Message: fmt.Sprintf("%s; %d do not load: %s", summary, len(broken), listNames(broken, 4)),
			Fix:     "remove or rewrite them: the runtime cannot use a spec it cannot load (efakit's plugin writes its own missing specs again when it starts)"}
	}
	return Check{ID: CheckCDI, Status: Pass, Message: summary + ", all load"}
}
