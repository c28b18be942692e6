// Package apicheck prints the exported API of the library's packages, one
// line a name, as Go's own api/*.txt files do: what a user can call, and so
// what the library promises (README, "Versions"). Its test compares every
// package's lines with api/<package>.txt at the repository's root and fails
// on any difference, so that a change of the API is a reviewed diff; go
// test ./internal/apicheck -update rewrites the files.
package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Packages are the library's public packages, by path in the module.
var Packages = []string{"sysfs", "pcie", "efa", "efa/health", "host", "neuron", "topology", "gpudirect", "snapshot", "rdmans"}

// API is the sorted lines of the exported API of the package in dir of
// fsys (test files left out): "pkg pcie, func ParseAddress(string) (Address, error)".
func API(fsys fs.FS, dir string) ([]string, error) {
	fset := token.NewFileSet()
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, path.Join(dir, n))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, n, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	p := &apiPrinter{fset: fset, pkg: "pkg " + dir + ", "}
	for _, f := range files {
		for _, d := range f.Decls {
			p.decl(d)
		}
	}
	sort.Strings(p.lines)
	return p.lines, nil
}

type apiPrinter struct {
	fset  *token.FileSet
	pkg   string
	lines []string
}

func (p *apiPrinter) add(format string, args ...any) {
	p.lines = append(p.lines, p.pkg+fmt.Sprintf(format, args...))
}

// expr prints an expression on one line.
func (p *apiPrinter) expr(e ast.Expr) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, p.fset, e)
	return strings.Join(strings.Fields(b.String()), " ")
}

func (p *apiPrinter) decl(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		sig := strings.TrimPrefix(p.expr(d.Type), "func")
		if d.Recv == nil {
			p.add("func %s%s", d.Name.Name, sig)
			return
		}
		recv := d.Recv.List[0].Type
		base := recv
		if s, ok := base.(*ast.StarExpr); ok {
			base = s.X
		}
		if ix, ok := base.(*ast.IndexExpr); ok {
			base = ix.X
		}
		if id, ok := base.(*ast.Ident); ok && id.IsExported() {
			p.add("method (%s) %s%s", p.expr(recv), d.Name.Name, sig)
		}
	case *ast.GenDecl:
		// In a const block, a spec without a type and values repeats the
		// one before (iota).
		var lastType ast.Expr
		for _, s := range d.Specs {
			if v, ok := s.(*ast.ValueSpec); ok && d.Tok == token.CONST {
				if v.Type != nil || len(v.Values) > 0 {
					lastType = v.Type
				} else if lastType != nil {
					v = &ast.ValueSpec{Names: v.Names, Type: lastType}
					s = v
				}
			}
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					p.typ(s)
				}
			case *ast.ValueSpec:
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					line := kind + " " + n.Name
					if s.Type != nil {
						line += " " + p.expr(s.Type)
					}
					if kind == "const" && i < len(s.Values) {
						line += " = " + p.expr(s.Values[i])
					}
					p.add("%s", line)
				}
			}
		}
	}
}

func (p *apiPrinter) typ(s *ast.TypeSpec) {
	name := s.Name.Name
	switch t := s.Type.(type) {
	case *ast.StructType:
		p.add("type %s struct", name)
		for _, f := range t.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() {
					p.add("type %s struct, %s %s", name, n.Name, p.expr(f.Type))
				}
			}
			if len(f.Names) == 0 {
				p.add("type %s struct, embedded %s", name, p.expr(f.Type))
			}
		}
	case *ast.InterfaceType:
		p.add("type %s interface", name)
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					p.add("type %s interface, %s%s", name, n.Name, strings.TrimPrefix(p.expr(m.Type), "func"))
				}
			}
			if len(m.Names) == 0 {
				p.add("type %s interface, embedded %s", name, p.expr(m.Type))
			}
		}
	default:
		eq := " "
		if s.Assign.IsValid() {
			eq = " = "
		}
		p.add("type %s%s%s", name, eq, p.expr(s.Type))
	}
}

// Names keeps the lines of an API that declare a name of their own: a
// constant, variable, function, type or method. A struct's fields and an
// interface's methods belong to their type.
func Names(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, " struct, ") || strings.Contains(l, " interface, ") {
			continue
		}
		out = append(out, l)
	}
	return out
}
