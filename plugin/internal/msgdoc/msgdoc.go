// Package msgdoc lists, from the plugin's source, every message it logs
// and every Event it writes on the Node, for the reference page
// docs/messages.md, which its test keeps current.
package msgdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Log is one message the code logs.
type Log struct {
	Message string
	Error   bool   // logged with an error (logger.Error)
	Where   string // the package directory
}

// Event is one Event the code writes: its reason, type and where.
type Event struct {
	Reason string // EFAUnhealthy
	Type   string // Warning or Normal
	Where  string
	// Message is how its message starts, when it starts with a
	// constant; "" otherwise.
	Message string
}

// Scan parses the non-test Go files under dirs (paths in fsys) and returns
// their log messages and Events, each once, sorted. reasons maps a reason
// constant's name (ReasonUnhealthy) to its value.
func Scan(fsys fs.FS, dirs []string, reasons map[string]string) ([]Log, []Event, error) {
	logs := map[Log]bool{}
	evs := map[Event]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, p, src, 0)
			if err != nil {
				return err
			}
			where := path.Dir(p)
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Info", "Error":
					i := 0
					if sel.Sel.Name == "Error" {
						i = 1
					}
					if len(call.Args) > i {
						if s, ok := literal(call.Args[i]); ok && s != "" && s[0] >= 'A' && s[0] <= 'Z' {
							logs[Log{Message: s, Error: sel.Sel.Name == "Error", Where: where}] = true
						}
					}
				case "Record", "RecordClaim":
					// Record(type, reason, device, message);
					// RecordClaim(type, reason, namespace, name, uid, device, message).
					if n := len(call.Args); (sel.Sel.Name == "Record" && n == 4) || (sel.Sel.Name == "RecordClaim" && n == 7) {
						typ, ok1 := selName(call.Args[0])
						reason, ok2 := selName(call.Args[1])
						if ok1 && ok2 && strings.HasPrefix(typ, "EventType") {
							e := Event{Reason: reasons[reason], Type: strings.TrimPrefix(typ, "EventType"), Where: where}
							e.Message, _ = leading(call.Args[len(call.Args)-1])
							if e.Reason == "" {
								e.Reason = reason
							}
							evs[e] = true
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	var outL []Log
	for l := range logs {
		outL = append(outL, l)
	}
	sort.Slice(outL, func(i, j int) bool {
		a, b := outL[i], outL[j]
		if a.Message != b.Message {
			return a.Message < b.Message
		}
		if a.Where != b.Where {
			return a.Where < b.Where
		}
		return !a.Error && b.Error
	})
	var outE []Event
	for e := range evs {
		outE = append(outE, e)
	}
	sort.Slice(outE, func(i, j int) bool {
		a, b := outE[i], outE[j]
		return fmt.Sprint(a.Reason, a.Type, a.Message, a.Where) < fmt.Sprint(b.Reason, b.Type, b.Message, b.Where)
	})
	return outL, outE, nil
}

// literal is a string constant's value.
func literal(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// leading is the constant a message starts with: the literal itself, or
// the left end of a concatenation, or a fmt.Sprintf format up to its
// first verb.
func leading(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		return literal(x)
	case *ast.BinaryExpr:
		return leading(x.X)
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(x.Args) > 0 {
			if s, ok := literal(x.Args[0]); ok {
				if i := strings.Index(s, "%"); i >= 0 {
					s = s[:i]
				}
				return s, true
			}
		}
	}
	return "", false
}

// selName is the name a selector expression selects: EventTypeWarning of
// corev1.EventTypeWarning.
func selName(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	return sel.Sel.Name, true
}

// Page is docs/messages.md.
func Page(logs []Log, evs []Event) string {
	var b strings.Builder
	b.WriteString(`# Events and log messages

Every Event the plugin writes on its Node, and every message it logs, read from its source by
` + "`go test ./internal/msgdoc -update`" + `, which fails when this page differs from the code. Events
are listed by ` + "`kubectl describe node NODE`" + `; an Event about one device names it in the
annotation ` + "`efakit.io/device`" + `. Logs are klog's structured lines: the message, then the details
as key/value pairs (` + "`kubectl -n efakit logs ds/efakit-plugin`" + `). What to do about each:
[troubleshooting](troubleshooting.md).

## Events

| reason | type | message starts | written by |
|---|---|---|---|
`)
	for _, e := range evs {
		msg := "-"
		if e.Message != "" {
			msg = "`" + strings.TrimSpace(e.Message) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` |\n", e.Reason, e.Type, msg, e.Where)
	}
	b.WriteString(`
## Log messages

| message | with an error | logged by |
|---|---|---|
`)
	for _, l := range logs {
		er := ""
		if l.Error {
			er = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", l.Message, er, l.Where)
	}
	return b.String()
}
