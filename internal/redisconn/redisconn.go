// Package redisconn opens Vigil's Redis connections from a URL. One URL
// names a standalone server, a Sentinel-managed master or a Redis Cluster;
// the supervisor hands the same URL to its workers (VIGIL_REDIS_URL), so
// that every process of a host connects the same way. asynq runs on the
// client Open returns (asynq.NewServerFromRedisClient and friends take a
// redis.UniversalClient), so its connection options are these too.
//
// Forms (user and password are optional, for Redis ACLs or requirepass):
//
//	redis://[user:password@]host:port[/db][?options]           standalone
//	rediss://…                                                 standalone over TLS
//	redis-sentinel://[user:password@]h1:26379,h2:26379/<master>[/db][?options]
//	rediss-sentinel://…                                        the same over TLS
//	redis-cluster://[user:password@]h1:7000,h2:7001,h3:7002[?options]
//	rediss-cluster://…                                         the same over TLS
//
// For Sentinel, user and password are the master's (and its replicas');
// the sentinels' own credentials, if any, are the options
// sentinel_username and sentinel_password. Redis Cluster has no databases:
// a path is an error. Options are go-redis's URL options (dial_timeout,
// read_timeout, pool_size, …, skip_verify for TLS), plus ca_file=<path>:
// a PEM file of the CAs that sign the server's certificate, for TLS with a
// private CA.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// URL schemes (see the package comment).
const (
	SchemeRedis          = "redis"
	SchemeRedisTLS       = "rediss"
	SchemeSentinel       = "redis-sentinel"
	SchemeSentinelTLS    = "rediss-sentinel"
	SchemeCluster        = "redis-cluster"
	SchemeClusterTLS     = "rediss-cluster"
	defaultPort          = "6379"
	defaultSentinelPort  = "26379"
	optCAFile            = "ca_file"
	optSentinelUser      = "sentinel_username"
	optSentinelPassword  = "sentinel_password"
	errPrefix            = "redis url"
	sentinelPathExamples = "redis-sentinel://host1:26379,host2:26379/mymaster/0"
)

// ErrURL marks a Redis URL that cannot be used.
var ErrURL = errors.New("invalid redis url")

// Open parses rawURL (see the package comment) and returns a client of the
// right kind: *redis.Client, *redis.Client through Sentinel (failover), or
// *redis.ClusterClient. It does not connect.
func Open(rawURL string) (redis.UniversalClient, error) {
	o, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return o.Client(), nil
}

// Options is a parsed Redis URL.
type Options struct {
	Kind     Kind
	Simple   *redis.Options         // Kind == Standalone
	Failover *redis.FailoverOptions // Kind == Sentinel
	Cluster  *redis.ClusterOptions  // Kind == Cluster
}

// Kind is the deployment a URL names.
type Kind int

// Kinds of deployment.
const (
	Standalone Kind = iota
	Sentinel
	Cluster
)

func (k Kind) String() string {
	switch k {
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	}
	return "standalone"
}

// Client returns a new client for o.
func (o *Options) Client() redis.UniversalClient {
	switch o.Kind {
	case Sentinel:
		return newFailoverClient(o.Failover)
	case Cluster:
		return newClusterClient(o.Cluster)
	}
	return redis.NewClient(o.Simple)
}

// Parse reads a Redis URL of any form of the package comment. An error
// names the URL without its passwords, then the reason (no part of a
// password either).
//
// Every client it configures honours its calls' contexts: a deadline
// bounds the call on the socket too (go-redis's ContextTimeoutEnabled).
// Without it a call whose reply does not come waits for the read timeout
// (seconds) whatever its context says, and the monitor's op_timeout bound
// is not one: a renewal held by a paused Redis would keep a stopping host
// from SIGKILLing its worker until past its Stop's limit (supervisor's
// TestStopWhileAShutdownTickWaits, TestClientWithoutDeadlinesIsReported).
func Parse(rawURL string) (*Options, error) {
	o, err := parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrURL, Redact(rawURL), strings.TrimPrefix(err.Error(), ErrURL.Error()+": "))
	}
	switch {
	case o.Simple != nil:
		o.Simple.ContextTimeoutEnabled = true
	case o.Failover != nil:
		o.Failover.ContextTimeoutEnabled = true
	case o.Cluster != nil:
		o.Cluster.ContextTimeoutEnabled = true
	}
	return o, nil
}

func parse(rawURL string) (*Options, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("%w: no scheme (want redis://, rediss://, redis-sentinel:// or redis-cluster://)", ErrURL)
	}
	// A host list is no valid URL host: parse the URL with one host, and
	// the list apart.
	hostList, oneHost := splitHosts(rawURL)
	u, err := url.Parse(oneHost)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrURL, redactErr(err, rawURL))
	}
	u.Host = hostList
	q := u.Query()
	caFile := q.Get(optCAFile)
	q.Del(optCAFile)
	tlsOn := strings.HasPrefix(scheme, "rediss")
	if caFile != "" && !tlsOn {
		return nil, fmt.Errorf("%w: ca_file is for TLS: use a rediss scheme", ErrURL)
	}
	var o *Options
	switch scheme {
	case SchemeRedis, SchemeRedisTLS:
		o, err = parseStandalone(u, q)
	case SchemeSentinel, SchemeSentinelTLS:
		o, err = parseSentinel(u, q, tlsOn)
	case SchemeCluster, SchemeClusterTLS:
		o, err = parseCluster(u, q, tlsOn)
	default:
		return nil, fmt.Errorf("%w: unknown scheme %q (want redis, rediss, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)", ErrURL, scheme)
	}
	if err != nil {
		return nil, err
	}
	if caFile != "" {
		if err := o.useCA(caFile); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// splitHosts returns the host part of rawURL's authority, and rawURL with
// that part replaced by "h".
func splitHosts(rawURL string) (hostList, oneHost string) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	at := strings.LastIndex(auth, "@") + 1
	return auth[at:], scheme + "://" + auth[:at] + "h" + rest[end:]
}

func parseStandalone(u *url.URL, q url.Values) (*Options, error) {
	if strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("%w: several hosts: use redis-cluster:// or redis-sentinel://", ErrURL)
	}
	v := *u
	v.RawQuery = q.Encode()
	opt, err := redis.ParseURL(v.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrURL, redactErr(err, u.String()))
	}
	return &Options{Kind: Standalone, Simple: opt}, nil
}

// hosts splits the comma-separated host list of a URL, adding the default
// port to hosts without one.
func hosts(u *url.URL, port string) ([]string, error) {
	var out []string
	for h := range strings.SplitSeq(u.Host, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, port)
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no host", ErrURL)
	}
	return out, nil
}

// goRedisURL builds the redis(s):// URL go-redis's multi-address parsers
// read: the first address as host, the others as addr options.
func goRedisURL(tlsOn bool, addrs []string, q url.Values) string {
	v := url.URL{Scheme: SchemeRedis, Host: addrs[0]}
	if tlsOn {
		v.Scheme = SchemeRedisTLS
	}
	q = cloneValues(q)
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	v.RawQuery = q.Encode()
	return v.String()
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

func parseSentinel(u *url.URL, q url.Values, tlsOn bool) (*Options, error) {
	addrs, err := hosts(u, defaultSentinelPort)
	if err != nil {
		return nil, err
	}
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, fmt.Errorf("%w: a Sentinel URL's path is /<master name>[/<db>], e.g. %s", ErrURL, sentinelPathExamples)
	}
	sUser, sPass := q.Get(optSentinelUser), q.Get(optSentinelPassword)
	q = cloneValues(q)
	q.Del(optSentinelUser)
	q.Del(optSentinelPassword)
	q.Set("master_name", parts[0])
	if len(parts) == 2 {
		if _, err := strconv.Atoi(parts[1]); err != nil {
			return nil, fmt.Errorf("%w: database %q is not a number", ErrURL, parts[1])
		}
		q.Set("db", parts[1])
	}
	opt, err := redis.ParseFailoverURL(goRedisURL(tlsOn, addrs, q))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrURL, redactErr(err, u.String()+"?"+sentinelQuery(sPass)))
	}
	if tlsOn {
		host, _, _ := net.SplitHostPort(addrs[0])
		opt.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12, InsecureSkipVerify: opt.TLSConfig != nil && opt.TLSConfig.InsecureSkipVerify}
	}
	opt.Username, opt.Password = userPassword(u)
	opt.SentinelUsername, opt.SentinelPassword = sUser, sPass
	return &Options{Kind: Sentinel, Failover: opt}, nil
}

func parseCluster(u *url.URL, q url.Values, tlsOn bool) (*Options, error) {
	addrs, err := hosts(u, defaultPort)
	if err != nil {
		return nil, err
	}
	if strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("%w: Redis Cluster has no databases: drop the path %q", ErrURL, u.Path)
	}
	// go-redis's cluster parser knows no skip_verify.
	skip, err := parseBool(q.Get("skip_verify"))
	if err != nil {
		return nil, fmt.Errorf("%w: skip_verify: %w", ErrURL, err)
	}
	q = cloneValues(q)
	q.Del("skip_verify")
	opt, err := redis.ParseClusterURL(goRedisURL(tlsOn, addrs, q))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrURL, redactErr(err, u.String()))
	}
	if tlsOn {
		opt.TLSConfig.MinVersion, opt.TLSConfig.InsecureSkipVerify = tls.VersionTLS12, skip
	}
	opt.Username, opt.Password = userPassword(u)
	return &Options{Kind: Cluster, Cluster: opt}, nil
}

// sentinelQuery is a query holding only the sentinel password p, so that
// redactErr finds it.
func sentinelQuery(p string) string {
	if p == "" {
		return ""
	}
	return optSentinelPassword + "=" + url.QueryEscape(p)
}

func parseBool(s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	return strconv.ParseBool(s)
}

func userPassword(u *url.URL) (string, string) {
	if u.User == nil {
		return "", ""
	}
	p, _ := u.User.Password()
	return u.User.Username(), p
}

// useCA makes the TLS configuration trust the CAs of the PEM file at path.
func (o *Options) useCA(path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: ca_file: %w", ErrURL, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%w: ca_file %s holds no PEM certificate", ErrURL, path)
	}
	var tc *tls.Config
	switch o.Kind {
	case Sentinel:
		tc = o.Failover.TLSConfig
	case Cluster:
		tc = o.Cluster.TLSConfig
	default:
		tc = o.Simple.TLSConfig
	}
	if tc == nil {
		return fmt.Errorf("%w: ca_file is for TLS: use a rediss scheme", ErrURL)
	}
	tc.RootCAs = pool
	return nil
}

// Addr names where a client connects, for messages: its address, or the
// first of its seed addresses and how many there are.
func Addr(c redis.UniversalClient) string {
	if pc, ok := plainClient(c); ok {
		c = pc
	}
	switch c := c.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "FailoverClient" {
			return a
		}
		if o := failoverOptionsOf(c); o != nil {
			return describeAddrs("sentinel "+o.MasterName+" via", o.SentinelAddrs)
		}
		return "sentinel"
	case *redis.ClusterClient:
		a := c.Options().Addrs
		return describeAddrs("cluster", a)
	}
	return "redis"
}

func describeAddrs(kind string, a []string) string {
	switch len(a) {
	case 0:
		return kind
	case 1:
		return kind + " " + a[0]
	}
	return fmt.Sprintf("%s %s (+%d)", kind, a[0], len(a)-1)
}

// Describe names where a URL points without its credentials, e.g.
// "127.0.0.1:6379", "sentinel mymaster via 10.0.0.1:26379 (+2)",
// "cluster 10.0.0.1:7000 (+2)".
func Describe(rawURL string) string {
	o, err := Parse(rawURL)
	if err != nil {
		return Redact(rawURL)
	}
	switch o.Kind {
	case Sentinel:
		return describeAddrs("sentinel "+o.Failover.MasterName+" via", o.Failover.SentinelAddrs)
	case Cluster:
		return describeAddrs("cluster", o.Cluster.Addrs)
	}
	return o.Simple.Addr
}

// Redact returns rawURL with its password, and the option
// sentinel_password, replaced by "xxxxx", for logs and errors. A URL that
// does not parse loses everything between its scheme and its last "@".
func Redact(rawURL string) string {
	hostList, oneHost := splitHosts(rawURL)
	u, err := url.Parse(oneHost)
	if err != nil || !strings.Contains(rawURL, "://") {
		s := rawURL
		if i := strings.LastIndex(s, "@"); i >= 0 {
			start := 0
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				start = j + 3
			} else if j := strings.Index(s, ":"); j >= 0 && j < i {
				start = j + 1
			}
			s = s[:start] + "xxxxx" + s[i:]
		}
		return sentinelPassword.ReplaceAllString(s, "${1}xxxxx")
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has(optSentinelPassword) {
		q.Set(optSentinelPassword, "xxxxx")
		u.RawQuery = q.Encode()
	}
	u.Host = hostList // url.URL.String keeps commas in a host
	return sentinelPassword.ReplaceAllString(u.String(), "${1}xxxxx")
}

// sentinelPassword finds the value of the option sentinel_password, also
// in a query that does not parse.
var sentinelPassword = regexp.MustCompile(`(?i)(sentinel_password=)[^&#]*`)

// redactErr is what err says without rawURL's secrets: net/url's errors
// quote the whole URL (and an escape error a piece of the password), so
// only their reason is kept; any password of rawURL left in the text is
// replaced.
func redactErr(err error, rawURL string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ee url.EscapeError
	s := err.Error()
	if errors.As(err, &ee) {
		s = "a % not followed by two hex digits (percent-encode a % in a password as %25)"
	}
	for _, secret := range secretsOf(rawURL) {
		s = strings.ReplaceAll(s, secret, "xxxxx")
	}
	return s
}

// secretsOf returns the password and sentinel password of rawURL, as
// written and decoded, as far as they can be told.
func secretsOf(rawURL string) []string {
	var out []string
	add := func(v string) {
		if len(v) >= 3 {
			out = append(out, v)
			if d, err := url.PathUnescape(v); err == nil && d != v && len(d) >= 3 {
				out = append(out, d)
			}
		}
	}
	_, rest, _ := strings.Cut(rawURL, "://")
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			add(pw)
		}
	}
	for _, m := range sentinelPassword.FindAllString(rawURL, -1) {
		_, v, _ := strings.Cut(m, "=")
		add(v)
	}
	return out
}

// HasPassword reports whether rawURL holds a password (or a sentinel
// password).
func HasPassword(rawURL string) bool {
	_, rest, _ := strings.Cut(rawURL, "://")
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	return (at >= 0 && strings.Contains(rest[:at], ":")) || sentinelPassword.MatchString(rawURL)
}

// SkipsVerify reports whether rawURL turns TLS verification off.
func SkipsVerify(rawURL string) bool {
	_, q, ok := strings.Cut(rawURL, "?")
	if !ok {
		return false
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		return strings.Contains(q, "skip_verify=true") || strings.Contains(q, "skip_verify=1")
	}
	b, _ := strconv.ParseBool(v.Get("skip_verify"))
	return b
}

// Ping checks that the server answers within timeout, naming where it is.
func Ping(ctx context.Context, c redis.UniversalClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if rc, ok := plainClient(c); ok {
			if o := failoverOptionsOf(rc); o != nil {
				ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				return explainSentinel(ectx, o, err)
			}
		}
		return fmt.Errorf("redis at %s does not answer: %w", Addr(c), err)
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		// A cluster client pings one node; every master must answer.
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			if err := n.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("redis cluster node %s does not answer: %w", n.Options().Addr, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// UsesTLS reports whether rawURL's scheme is one of the TLS ones (rediss,
// rediss-sentinel, rediss-cluster).
func UsesTLS(rawURL string) bool {
	scheme, _, _ := strings.Cut(rawURL, "://")
	return strings.HasPrefix(strings.ToLower(scheme), SchemeRedisTLS)
}
