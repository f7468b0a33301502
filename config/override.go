package config

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// field is one scalar setting, addressable as a flag and an env variable.
type field struct {
	path   string // "heartbeat.ttl"
	envTag string // the variable's name when not derived from path, then its aliases ("A,B")
	doc    string // its doc tag
	v      reflect.Value
}

func (f field) env() string {
	if f.envTag != "" {
		name, _, _ := strings.Cut(f.envTag, ",")
		return name
	}
	return "VIGIL_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(f.path))
}

// aliases are the other names the field's variable is read under.
func (f field) aliases() []string {
	_, rest, ok := strings.Cut(f.envTag, ",")
	if !ok {
		return nil
	}
	return strings.Split(rest, ",")
}

// lookupEnv reads the field's variable, or else one of its aliases. The
// name and an alias set to different values is an error: which one was
// meant cannot be told.
func (f field) lookupEnv(lookup func(string) (string, bool)) (name, value string, ok bool, err error) {
	name = f.env()
	value, ok = lookup(name)
	for _, a := range f.aliases() {
		av, aok := lookup(a)
		switch {
		case !aok:
		case !ok:
			name, value, ok = a, av, true
		case av != value:
			return "", "", false, fmt.Errorf("%s and its alias %s are both set, to different values: unset one", name, a)
		}
	}
	return name, value, ok, nil
}
func (f field) flag() string { return strings.ReplaceAll(f.path, "_", "-") }

func (f field) set(s string) error {
	if p, ok := f.v.Addr().Interface().(interface{ Set(string) error }); ok {
		if err := p.Set(s); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		return nil
	}
	var err error
	switch f.v.Kind() {
	case reflect.String:
		f.v.SetString(s)
	case reflect.Bool:
		var b bool
		if b, err = strconv.ParseBool(s); err == nil {
			f.v.SetBool(b)
		}
	case reflect.Int:
		var n int64
		if n, err = strconv.ParseInt(s, 10, 64); err == nil {
			f.v.SetInt(n)
		}
	case reflect.Float64:
		var x float64
		if x, err = strconv.ParseFloat(s, 64); err == nil {
			f.v.SetFloat(x)
		}
	default:
		err = fmt.Errorf("unsupported kind %s", f.v.Kind())
	}
	if err != nil {
		return fmt.Errorf("%s: invalid value %q: %w", f.path, s, err)
	}
	return nil
}

// fields lists c's scalar settings (pools are file-only).
func (c *Config) fields() []field {
	var out []field
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			fv := v.Field(i)
			path := prefix + tag
			_, settable := fv.Addr().Interface().(interface{ Set(string) error })
			switch {
			case fv.Kind() == reflect.Struct:
				walk(path+".", fv)
			case (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && !settable:
			default:
				out = append(out, field{path: path, envTag: t.Field(i).Tag.Get("env"), doc: t.Field(i).Tag.Get("doc"), v: fv})
			}
		}
	}
	walk("", reflect.ValueOf(c).Elem())
	return out
}

// ApplyEnv sets every field whose VIGIL_* variable is set.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	for _, f := range c.fields() {
		name, s, ok, err := f.lookupEnv(lookup)
		if err != nil {
			return err
		}
		if ok {
			if err := f.set(s); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// Flags records the flags given on the command line, to be applied over
// the file and the environment.
type Flags struct {
	set   []func(*Config) error
	given map[string]bool // by field path
}

// Given reports whether the flag of the field path ("token") was given.
func (fl *Flags) Given(path string) bool { return fl != nil && fl.given[path] }

// RegisterFlags adds a flag for every scalar field (e.g. --heartbeat.ttl,
// --policy.max-in-window) to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	fl := &Flags{given: map[string]bool{}}
	d := Default()
	for _, f := range d.fields() {
		path := f.path
		usage := fmt.Sprintf("%s (env %s, default %v)", f.doc, f.env(), f.v.Interface())
		register := fs.Func
		if f.v.Kind() == reflect.Bool {
			register = fs.BoolFunc
		}
		register(f.flag(), usage, func(s string) error {
			fl.given[path] = true
			fl.set = append(fl.set, func(c *Config) error {
				for _, g := range c.fields() {
					if g.path == path {
						return g.set(s)
					}
				}
				return nil
			})
			return nil
		})
	}
	return fl
}

// Apply sets the recorded flags on c.
func (fl *Flags) Apply(c *Config) error {
	for _, f := range fl.set {
		if err := f(c); err != nil {
			return err
		}
	}
	return nil
}
