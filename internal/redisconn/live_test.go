package redisconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestACLUserAndPassword runs against a private redis-server whose default
// user is off: only the ACL user of the URL gets in.
func TestACLUserAndPassword(t *testing.T) {
	srv := testredis.StartServer(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(srv.Port)})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "vigil", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatalf("ACL SETUSER default off: %v", err)
	}
	base := "127.0.0.1:" + strconv.Itoa(srv.Port) + "/0"

	good, err := Open("redis://vigil:s3cret@" + base)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if err := Ping(ctx, good, 2*time.Second); err != nil {
		t.Fatalf("ACL user: %v", err)
	}
	if err := good.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("write as ACL user: %v", err)
	}
	who, err := good.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil || who != "vigil" {
		t.Fatalf("ACL WHOAMI = %q, %v", who, err)
	}
	for _, bad := range []string{"redis://" + base, "redis://vigil:wrong@" + base} {
		c, err := Open(bad)
		if err != nil {
			t.Fatal(err)
		}
		err = Ping(ctx, c, 2*time.Second)
		c.Close()
		if err == nil {
			t.Fatalf("%s got in", bad)
		}
		if !strings.Contains(err.Error(), "WRONGPASS") && !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("%s: %v, want an authentication error", bad, err)
		}
	}
}

// TestTLSWithPrivateCA runs a redis-server that speaks TLS only, with a
// certificate of a CA made here: rediss:// with ca_file connects, rediss://
// without it is refused (unknown authority).
func TestTLSWithPrivateCA(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make test-redis installs it)")
	}
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	port := testredis.FreePort(t)
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server with TLS: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	url := "rediss://localhost:" + strconv.Itoa(port) + "/0?ca_file=" + ca
	c, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = Ping(ctx, c, 500*time.Millisecond)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TLS ping: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // waiting for an external process to listen
	}
	plain, err := Open("rediss://localhost:" + strconv.Itoa(port) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := Ping(ctx, plain, 2*time.Second); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v, want a certificate error", err)
	}
}

// writeCerts makes a CA and a certificate for localhost signed by it.
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vigil test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, block := range map[string]*pem.Block{
		ca:   {Type: "CERTIFICATE", Bytes: caDER},
		cert: {Type: "CERTIFICATE", Bytes: srvDER},
		key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}
