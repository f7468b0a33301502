package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/vigil-dev/vigil/internal/redisconn"
)

// MinTokenLen is the shortest token vigil serve does not warn about.
const MinTokenLen = 16

// ReadSecretFiles sets token and redis from token_file and redis_file (the
// first line, trimmed). Setting both a value and its file is an error.
func (c *Config) ReadSecretFiles() error {
	for _, s := range []struct {
		name, file string
		v          *string
	}{{"token", c.TokenFile, &c.Token}, {"redis", c.RedisFile, &c.Redis}} {
		if s.file == "" {
			continue
		}
		if *s.v != "" {
			return fmt.Errorf("%s and %s_file are both set: keep one", s.name, s.name)
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			return fmt.Errorf("%s_file: %w", s.name, err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if *s.v = strings.TrimSpace(line); *s.v == "" {
			return fmt.Errorf("%s_file: %s is empty", s.name, s.file)
		}
	}
	return nil
}

// Warnings lists what the operator should fix about secrets, given the
// config file's path ("" = none), the configuration as read from that file
// alone, and the flags given: a secret-holding file or secret file readable
// by other users, TLS verification off, a short token, secrets on the
// command line (visible in the process list).
func (c Config) Warnings(path string, file Config, fl *Flags) []string {
	var out []string
	if path != "" && (file.Token != "" || redisconn.HasPassword(file.Redis)) && othersRead(path) {
		out = append(out, fmt.Sprintf("config file %s holds a secret (token or Redis password) and is readable by other users: chmod 600 it, or use token_file / VIGIL_TOKEN_FILE", path))
	}
	for _, f := range []string{c.TokenFile, c.RedisFile} {
		if f != "" && othersRead(f) {
			out = append(out, fmt.Sprintf("secret file %s is readable by other users: chmod 600 it", f))
		}
	}
	if redisconn.SkipsVerify(c.Redis) {
		out = append(out, "the Redis URL sets skip_verify: TLS certificates are not checked, anyone on the path can read and change Vigil's state (use ca_file for a private CA)")
	}
	if c.Token != "" && len(c.Token) < MinTokenLen {
		out = append(out, fmt.Sprintf("the admin token is shorter than %d bytes: use a long random one (e.g. openssl rand -hex 32)", MinTokenLen))
	}
	if fl.Given("token") || (fl.Given("redis") && redisconn.HasPassword(c.Redis)) {
		out = append(out, "a secret given with --token or --redis is visible in the process list (ps) to every local user: use --token-file / VIGIL_TOKEN_FILE (or VIGIL_TOKEN) and --redis-file / VIGIL_REDIS_FILE instead")
	}
	return out
}

// othersRead reports whether users other than the owner may read path.
func othersRead(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	return st.Mode().Perm()&0o044 != 0 && !errors.Is(err, fs.ErrNotExist)
}
