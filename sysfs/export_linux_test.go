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

// CountSyscalls makes the openat2 directory root r count the system calls
// it makes, by name, into the returned function's answer. It reports
// false when r is no such root.
func CountSyscalls(r *Root) (func() map[string]int, bool) {
	d, ok := r.ReadLinkFS.(*dirFS)
	if !ok {
		return nil, false
	}
	d.calls = &syscalls{n: map[string]int{}}
	return func() map[string]int {
		d.calls.mu.Lock()
		defer d.calls.mu.Unlock()
		out := make(map[string]int, len(d.calls.n))
		for k, v := range d.calls.n {
			out[k] = v
		}
		return out
	}, true
}
