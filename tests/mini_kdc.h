// MiniKdc: a throw-away MIT Kerberos KDC for tests, in a realm of its own,
// on 127.0.0.1 at a free port, under a temporary directory that goes away
// with it. Principals and keytabs come from kadmin.local, tickets from
// kinit, as a user of a real realm would make them. It points this process
// at its krb5.conf (KRB5_CONFIG) and a ticket cache of its own
// (KRB5CCNAME); the Kerberos library reads both when it next acts.
//
// Needs Debian's krb5-kdc, krb5-admin-server and krb5-user. One test thread
// uses it; the KDC is a child process ended by its PID.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "osprey/base/status.h"

namespace osprey::test {

class MiniKdc {
 public:
  static constexpr const char* kRealm = "OSPREYTEST.COM";

  // Creates the realm and starts the KDC. `extra_libdefaults`: more lines
  // for krb5.conf's [libdefaults] (e.g. "clockskew = 1").
  static Status Start(std::unique_ptr<MiniKdc>* out, const std::string& extra_libdefaults = "");
  ~MiniKdc();

  // A principal with a random key, exported to `keytab` (a path under
  // dir() when relative).
  Status AddPrincipalWithKeytab(const std::string& principal, const std::string& keytab);
  Status DeletePrincipal(const std::string& principal);
  // kinit as `principal` from `keytab` into this process's ticket cache;
  // `lifetime` as kinit's -l ("10s"), empty for the realm's default.
  Status Kinit(const std::string& principal, const std::string& keytab,
               const std::string& lifetime = "");
  // Empties the ticket cache (kdestroy).
  Status Kdestroy();

  // A keytab holding a key for `principal` that this KDC never sees (ktutil
  // alone): a principal of a realm krb5.conf does not know, say.
  Status WriteKeytabOutsideTheKdc(const std::string& principal, const std::string& keytab);
  // Makes the ticket cache say the KDC's clock is `seconds` ahead of this
  // host's (the offset MIT Kerberos keeps in a cache, kdc_timesync), so the
  // next Kerberos step stamps its authenticator that far off: a clock skew
  // without touching the machine's clock.
  Status SkewTicketCacheClock(int32_t seconds);

  // Points krb5.conf at another "KDC" port (a test's silent listener), or
  // back at this KDC with port().
  Status UseKdcPort(int port);
  int port() const { return port_; }

  // Stops the KDC (it can start again) or starts it again.
  Status StopKdc();
  Status StartKdc();

  const std::string& dir() const { return dir_; }
  const std::string& ccache() const { return ccache_; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  MiniKdc() = default;
  Status Run(const std::string& command, std::string* output = nullptr) const;
  void WriteKrb5Conf(int kdc_port) const;
  std::string extra_libdefaults_;
  std::string dir_;
  std::string ccache_;
  int port_ = 0;
  pid_t kdc_pid_ = -1;
};

}  // namespace osprey::test
