// Certificates for tests: a temporary directory that goes with its owner,
// and self-signed certificates written there as PEM files. Each certificate
// is its own CA, so it doubles as the CA file of whoever should trust it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "osprey/base/status.h"
#include "osprey/transport/tls_context.h"

namespace osprey::test {

struct CertFiles {
  std::string cert, key;
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "osprey-tls-XXXXXX").string();
    EXPECT_NE(nullptr, mkdtemp(tmpl.data()));
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// For every address the tests dial, so that clients checking the host pass.
inline CertFiles MakeCert(const TempDir& dir, const std::string& name) {
  std::string cert, key;
  Status s =
      transport::TlsContext::MakeSelfSigned(name, &cert, &key, "IP:127.0.0.1,IP:::1,DNS:localhost");
  EXPECT_TRUE(s.ok()) << s.ToString();
  CertFiles f{dir.path() + "/" + name + ".crt", dir.path() + "/" + name + ".key"};
  std::ofstream(f.cert) << cert;
  std::ofstream(f.key) << key;
  return f;
}

}  // namespace osprey::test
