#pragma once
// A throwaway PKI for the TLS tests, made once per process with the OpenSSL C API (no CLI
// needed) in a fresh directory under /tmp. EC P-256 keys, SHA-256 signatures, valid for a day:
//   ca.pem, ca.key              the group's CA
//   node0.pem/.key, node1.pem/.key   members signed by ca (SAN DNS:paco-node, EKU server+client)
//   rogue_ca.pem                another CA
//   rogue.pem/.key              a member certificate signed by rogue_ca
//   both_ca.pem                 ca.pem and rogue_ca.pem together (trusts either)
//   node0_enc.key               node0.key encrypted with a passphrase

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "paco/net/tls_options.hpp"

namespace paco::testing {

namespace pki_detail {

inline EVP_PKEY* make_key() {
  EVP_PKEY* k = nullptr;
  EVP_PKEY_CTX* c = ::EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr);
  if (!c || ::EVP_PKEY_keygen_init(c) != 1 ||
      ::EVP_PKEY_CTX_set_ec_paramgen_curve_nid(c, NID_X9_62_prime256v1) != 1 ||
      ::EVP_PKEY_keygen(c, &k) != 1)
    throw std::runtime_error("tls_pki: EC key generation failed");
  ::EVP_PKEY_CTX_free(c);
  return k;
}

// A certificate for `key` named cn, signed by issuer (self-signed when issuer is null).
inline X509* make_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
                       long serial) {
  X509* x = ::X509_new();
  ::X509_set_version(x, 2);
  ::ASN1_INTEGER_set(::X509_get_serialNumber(x), serial);
  ::X509_gmtime_adj(::X509_getm_notBefore(x), -3600);
  ::X509_gmtime_adj(::X509_getm_notAfter(x), 86400);
  ::X509_set_pubkey(x, key);
  X509_NAME* n = ::X509_get_subject_name(x);
  ::X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                               -1, -1, 0);
  ::X509_set_issuer_name(x, issuer ? ::X509_get_subject_name(issuer) : n);
  X509V3_CTX v;
  X509V3_set_ctx_nodb(&v);
  ::X509V3_set_ctx(&v, issuer ? issuer : x, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const char* value) {
    X509_EXTENSION* e = ::X509V3_EXT_conf_nid(nullptr, &v, nid, value);
    if (!e) throw std::runtime_error("tls_pki: extension");
    ::X509_add_ext(x, e, -1);
    ::X509_EXTENSION_free(e);
  };
  if (ca) {
    add(NID_basic_constraints, "critical,CA:TRUE");
    add(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add(NID_basic_constraints, "CA:FALSE");
    add(NID_subject_alt_name, "DNS:paco-node");
    add(NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (::X509_sign(x, issuer_key ? issuer_key : key, ::EVP_sha256()) <= 0)
    throw std::runtime_error("tls_pki: signing");
  return x;
}

inline void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("tls_pki: cannot write " + path);
  bool ok = cert ? ::PEM_write_X509(f, cert) == 1
                 : ::PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  if (!ok) throw std::runtime_error("tls_pki: PEM write " + path);
}

inline std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace pki_detail

// The PKI's directory (made on first use). Throws std::runtime_error if OpenSSL fails.
inline const std::string& tls_pki_dir() {
  static const std::string dir = [] {
    using namespace pki_detail;
    char t[] = "/tmp/paco_tls_XXXXXX";
    if (!::mkdtemp(t)) throw std::runtime_error("tls_pki: mkdtemp");
    std::string d = t;
    EVP_PKEY* ca_key = make_key();
    X509* ca = make_cert(ca_key, "paco-test-ca", nullptr, nullptr, true, 1);
    write_pem(d + "/ca.pem", ca, nullptr);
    write_pem(d + "/ca.key", nullptr, ca_key);
    for (int i = 0; i < 2; ++i) {
      EVP_PKEY* k = make_key();
      std::string cn = "node" + std::to_string(i);
      X509* c = make_cert(k, cn.c_str(), ca, ca_key, false, 10 + i);
      write_pem(d + "/" + cn + ".pem", c, nullptr);
      write_pem(d + "/" + cn + ".key", nullptr, k);
      ::X509_free(c);
      ::EVP_PKEY_free(k);
    }
    EVP_PKEY* rk = make_key();
    X509* rca = make_cert(rk, "rogue-ca", nullptr, nullptr, true, 1);
    write_pem(d + "/rogue_ca.pem", rca, nullptr);
    EVP_PKEY* k = make_key();
    X509* c = make_cert(k, "rogue", rca, rk, false, 2);
    write_pem(d + "/rogue.pem", c, nullptr);
    write_pem(d + "/rogue.key", nullptr, k);
    EVP_PKEY* k0 = nullptr;
    if (std::FILE* f = std::fopen((d + "/node0.key").c_str(), "r")) {
      k0 = ::PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
      std::fclose(f);
    }
    std::FILE* fe = std::fopen((d + "/node0_enc.key").c_str(), "w");
    char pass[] = "secret";
    if (!k0 || !fe ||
        ::PEM_write_PrivateKey(fe, k0, ::EVP_aes_256_cbc(), reinterpret_cast<unsigned char*>(pass),
                               6, nullptr, nullptr) != 1)
      throw std::runtime_error("tls_pki: encrypted key");
    std::fclose(fe);
    ::EVP_PKEY_free(k0);
    std::ofstream(d + "/both_ca.pem")
        << slurp_file(d + "/ca.pem") << slurp_file(d + "/rogue_ca.pem");
    for (X509* x : {ca, rca, c}) ::X509_free(x);
    for (EVP_PKEY* x : {ca_key, rk, k}) ::EVP_PKEY_free(x);
    return d;
  }();
  return dir;
}

// TLS options of member i (node<i % 2>) of the test PKI.
inline net::tls_options tls_member(int i) {
  const auto& d = tls_pki_dir();
  std::string n = d + "/node" + std::to_string(i % 2);
  return {
      .enabled = true, .ca_file = d + "/ca.pem", .cert_file = n + ".pem", .key_file = n + ".key"};
}

}  // namespace paco::testing
