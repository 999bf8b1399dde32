package embednats

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// certValidity is how long a daemon's certificate is valid. Clients pin
// it by fingerprint for one run of the daemon, so expiry protects nothing;
// it only has to outlive the daemon.
const certValidity = 10 * 365 * 24 * time.Hour

// daemonCert makes the certificate a daemon proves itself with: new on
// every start, self-signed, ECDSA P-256 (a cheap handshake for a hook's
// cold start), for the loopback names and the listener's host. The key
// stays in memory; only the certificate goes into the discovery file.
// name (a store ID) goes into its common name, for people.
func daemonCert(name, host string, now time.Time) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "scribe daemon " + name},
		// A little before now, for clocks that disagree by a few minutes.
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(certValidity),
		// Its own root: other clients load it as their CA file, and
		// OpenSSL-based ones want a CA to have these.
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	// Clients check the name in the URL too: cover a --host the
	// loopback names do not.
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	} else if host != "" && host != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
