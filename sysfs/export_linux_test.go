package sysfs

// AskDirFS makes the openat2 directory root r call ask with every question
// that reaches it. It reports false when r is no such root (openat2 is
// missing and OpenDir fell back to os.Root).
func AskDirFS(r *Root, ask func(op, name string)) bool {
	d, ok := r.ReadLinkFS.(*dirFS)
	if ok {
		d.ask = ask
	}
	return ok
}
