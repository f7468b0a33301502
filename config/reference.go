package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Reference is the reference of every setting, in Markdown: for each, its
// place in the file, its default, its environment variable and flag, and
// its doc tag. docs/config-reference.md is its output
// (TestReferenceIsCurrent; `make docs` writes it again).
func Reference() string {
	var b strings.Builder
	b.WriteString("# Every setting\n\n")
	b.WriteString("The reference of `vigil serve`'s configuration: every field of the YAML file with its default,\n" +
		"its environment variable and its flag (flags win over the environment, the environment over the file).\n" +
		"Durations are written in Go's syntax (`500ms`, `2s`, `5m`), sizes as bytes or with a unit (`512KiB`,\n" +
		"`1MiB`, `1GB`), lists in the environment and on the command line comma-separated. Unknown fields are\n" +
		"errors, and every error names its field. The guide is [configuration.md](configuration.md).\n\n")
	b.WriteString("This page is generated from the configuration's types (package `config`, `Reference`): `make docs`\n" +
		"writes it again, and a test fails when it is stale.\n")
	d := Default()
	var sections []section
	collect(&sections, topLevel, "", "", reflect.ValueOf(d), true)
	pool := Config{Pools: []Pool{{}}}
	pool.PoolDefaults()
	collect(&sections, "pools[]", "", "One entry of `pools`, a pool of worker processes. Pool settings are read from the file only.",
		reflect.ValueOf(pool.Pools[0]), false)
	collect(&sections, "schedules[]", "", "One entry of `schedules`, a periodic task. Schedule settings are read from the file only.",
		reflect.ValueOf(Schedule{}), false)
	for _, s := range sections {
		b.WriteString("\n## " + s.title + "\n\n")
		if s.doc != "" {
			b.WriteString(s.doc + "\n\n")
		}
		if s.scalar {
			b.WriteString("| setting | default | environment, flag | what it does |\n|---|---|---|---|\n")
		} else {
			b.WriteString("| setting | default | what it does |\n|---|---|---|\n")
		}
		for _, r := range s.rows {
			switch {
			case s.scalar && r.env == "":
				fmt.Fprintf(&b, "| `%s` | %s | file only | %s |\n", r.path, r.def, r.doc)
			case s.scalar:
				fmt.Fprintf(&b, "| `%s` | %s | `%s`, `--%s` | %s |\n", r.path, r.def, r.env, r.flag, r.doc)
			default:
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.path, r.def, r.doc)
			}
		}
	}
	return b.String()
}

// section is one heading of the reference: a struct of the file.
type section struct {
	title, doc string
	scalar     bool // its fields have a variable and a flag
	rows       []row
}

type row struct{ path, def, env, flag, doc string }

// collect adds v's fields as the section title, each row named
// rowPrefix+its yaml name, then a section for each struct-valued field.
func collect(out *[]section, title, rowPrefix, doc string, v reflect.Value, scalar bool) {
	*out = append(*out, section{title: title, doc: doc, scalar: scalar})
	me := len(*out) - 1
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || !f.IsExported() {
			continue
		}
		path, fv := rowPrefix+tag, v.Field(i)
		switch {
		case fv.Kind() == reflect.Struct:
			sub := path
			if title != topLevel {
				sub = title + "." + tag
			}
			collect(out, sub, path+".", f.Tag.Get("doc"), fv, scalar)
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct:
			(*out)[me].rows = append((*out)[me].rows, row{path: path, def: "none", doc: f.Tag.Get("doc") + " See `" + path + "[]` below."})
		default:
			r := row{path: path, def: defaultText(fv), doc: f.Tag.Get("doc")}
			if d := f.Tag.Get("default"); d != "" { // a default another package applies
				r.def = "`" + d + "`"
			}
			if scalar {
				fl := field{path: path, envTag: f.Tag.Get("env")}
				r.env, r.flag = fl.env(), fl.flag()
			}
			(*out)[me].rows = append((*out)[me].rows, r)
		}
	}
}

const topLevel = "Top level"

// defaultText writes a default as the file would.
func defaultText(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return "none"
		}
		return defaultText(v.Elem())
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.Len() == 0:
		return "none"
	case v.Kind() == reflect.String && v.Len() == 0:
		return "none"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}
