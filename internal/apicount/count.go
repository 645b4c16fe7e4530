package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// API is the exported surface of one package.
type API struct {
	// Name is the package's name, e.g. "backpressure".
	Name string
	// Names are the exported top-level consts, vars, types and funcs,
	// sorted, e.g. "Config" or "New".
	Names []string
	// Methods are the exported methods of exported types, sorted, as
	// "Type.Method".
	Methods []string
}

// Count returns the exported API of each non-main package in dir, counted
// over its non-test .go files, sorted by package name. Build constraints are
// not evaluated: every non-test file counts.
func Count(dir string) ([]API, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	var out []API
	for name, files := range pkgs {
		if name == "main" {
			continue
		}
		d, err := doc.NewFromFiles(fset, files, "example.com/"+name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		out = append(out, api(d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// api collects the exported names of d. go/doc files constants, variables
// and constructors of a type under the type; they count as top-level names
// all the same, since that is what a reader of the package index sees.
func api(d *doc.Package) API {
	a := API{Name: d.Name}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if token.IsExported(n) {
					a.Names = append(a.Names, n)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			a.Names = append(a.Names, f.Name)
		}
	}
	values(d.Consts)
	values(d.Vars)
	funcs(d.Funcs)
	for _, t := range d.Types {
		a.Names = append(a.Names, t.Name)
		values(t.Consts)
		values(t.Vars)
		funcs(t.Funcs)
		for _, m := range t.Methods {
			a.Methods = append(a.Methods, t.Name+"."+m.Name)
		}
	}
	sort.Strings(a.Names)
	sort.Strings(a.Methods)
	return a
}
