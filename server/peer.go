package server

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// The request's peer and what proxies say about the client (docs/design.md §7).
// Forwarding headers are believed only from Config.TrustedProxies.

// peerAddr is the TCP peer's address (invalid if RemoteAddr is not an
// address, as with some test and in-process transports).
func peerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err == nil {
		return ap.Addr().Unmap()
	}
	a, err := netip.ParseAddr(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// trustedProxy reports whether the peer is one of the trusted proxies.
func (s *server) trustedProxy(r *http.Request) bool {
	if len(s.cfg.TrustedProxies) == 0 {
		return false
	}
	a := peerAddr(r)
	for _, p := range s.cfg.TrustedProxies {
		if a.IsValid() && p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is the client's address: the peer's, or, from a trusted
// proxy, the last address of X-Forwarded-For that is not a trusted proxy
// itself (what the proxy saw; the entries before it are the client's
// word).
func (s *server) clientAddr(r *http.Request) string {
	peer := peerAddr(r)
	if !s.trustedProxy(r) {
		if peer.IsValid() {
			return peer.String()
		}
		return r.RemoteAddr
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		a = a.Unmap()
		trusted := false
		for _, p := range s.cfg.TrustedProxies {
			trusted = trusted || p.Contains(a)
		}
		if !trusted {
			return a.String()
		}
	}
	return peer.String()
}

// overHTTPS reports whether the client reached us over TLS: directly, or
// through a trusted proxy that says so (X-Forwarded-Proto: https).
func (s *server) overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !s.trustedProxy(r) {
		return false
	}
	p := r.Header.Values("X-Forwarded-Proto")
	if len(p) == 0 {
		return false
	}
	// The proxy nearest to us appended last.
	protos := strings.Split(p[len(p)-1], ",")
	return strings.EqualFold(strings.TrimSpace(protos[len(protos)-1]), "https")
}

// forwarded reports any forwarding header, whoever sent it.
func forwarded(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// fromThisHost is the rule for mutations without a token: the TCP peer is
// loopback, the Host header names a loopback address, localhost or a
// listen host (else a browser under DNS rebinding gets in), and no
// forwarding header is there (else a reverse proxy on this host lets
// remote clients in).
func (s *server) fromThisHost(r *http.Request) bool {
	if a := peerAddr(r); !a.IsValid() || !a.IsLoopback() || forwarded(r) {
		return false
	}
	return s.localHost(r.Host)
}

// localHost reports whether the Host header value hostport names this
// host: a loopback address, localhost, or one of the listen hosts.
func (s *server) localHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Unmap().IsLoopback() {
			return true
		}
	} else if strings.EqualFold(host, "localhost") {
		return true
	}
	for _, l := range s.cfg.ListenHosts {
		if strings.EqualFold(host, strings.Trim(l, "[]")) {
			return true
		}
	}
	return false
}

// sameOrigin judges a browser's request by what it says of its origin:
// Sec-Fetch-Site must be same-origin if present, the Origin must name this
// server's Host if present, and one of them must be present (with neither,
// nothing shows the request is not a cross-site form post by an old
// browser). requireOne false accepts a request with neither (a client
// that is no browser, without an ambient credential).
func sameOrigin(r *http.Request, requireOne bool) (bool, string) {
	site, hasSite := r.Header["Sec-Fetch-Site"]
	origin, hasOrigin := r.Header["Origin"]
	if hasSite && (len(site) != 1 || site[0] != "same-origin") {
		return false, "cross-site request refused (Sec-Fetch-Site)"
	}
	if hasOrigin {
		u, err := url.Parse(strings.TrimSpace(origin[0]))
		if len(origin) != 1 || err != nil || u.Host == "" || !strings.EqualFold(hostWithPort(u.Host, u.Scheme), hostWithPort(r.Host, u.Scheme)) {
			return false, "request from another origin refused (Origin does not name this server)"
		}
	}
	if requireOne && !hasSite && !hasOrigin {
		return false, "a cookie-authenticated mutation must say it comes from this origin (Origin or Sec-Fetch-Site: same-origin)"
	}
	return true, ""
}

// hostWithPort adds scheme's default port to a host without one.
func hostWithPort(h, scheme string) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	port := "80"
	if strings.EqualFold(scheme, "https") {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(h, "[]"), port)
}
