// MonoDelta, MonoTime and Deadline: durations and instants on the steady
// clock. Plain values; any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

namespace osprey {

class MonoDelta {
 public:
  constexpr MonoDelta() = default;
  // The factories saturate: a value too large for int64 nanoseconds (about
  // 292 years) becomes the largest (or, negative, the smallest) delta, never
  // a wrapped one. NaN is zero.
  static constexpr MonoDelta FromNanoseconds(int64_t ns) { return MonoDelta(ns); }
  static constexpr MonoDelta FromMicroseconds(int64_t us) { return Scaled(us, 1000); }
  static constexpr MonoDelta FromMilliseconds(int64_t ms) { return Scaled(ms, 1000000); }
  static constexpr MonoDelta FromSeconds(double s) {
    if (!(s == s)) return MonoDelta();  // NaN
    if (s >= 9.2e9) return Max();
    if (s <= -9.2e9) return Min();
    return MonoDelta(static_cast<int64_t>(s * 1e9));
  }
  static constexpr MonoDelta Max() { return MonoDelta(INT64_MAX); }
  static constexpr MonoDelta Min() { return MonoDelta(INT64_MIN); }

  constexpr int64_t ToNanoseconds() const { return ns_; }
  constexpr int64_t ToMicroseconds() const { return ns_ / 1000; }
  constexpr int64_t ToMilliseconds() const { return ns_ / 1000000; }
  constexpr double ToSeconds() const { return static_cast<double>(ns_) / 1e9; }
  std::string ToString() const;

  // Saturating, like the factories.
  constexpr MonoDelta operator+(MonoDelta o) const {
    int64_t r = 0;
    if (__builtin_add_overflow(ns_, o.ns_, &r)) return o.ns_ > 0 ? Max() : Min();
    return MonoDelta(r);
  }
  constexpr MonoDelta operator-(MonoDelta o) const {
    int64_t r = 0;
    if (__builtin_sub_overflow(ns_, o.ns_, &r)) return o.ns_ < 0 ? Max() : Min();
    return MonoDelta(r);
  }
  constexpr MonoDelta operator*(int64_t k) const { return Scaled(ns_, k); }
  constexpr auto operator<=>(const MonoDelta&) const = default;

 private:
  constexpr explicit MonoDelta(int64_t ns) : ns_(ns) {}
  static constexpr MonoDelta Scaled(int64_t v, int64_t unit) {
    int64_t r = 0;
    if (__builtin_mul_overflow(v, unit, &r)) return v > 0 ? Max() : Min();
    return MonoDelta(r);
  }
  int64_t ns_ = 0;
};

class MonoTime {
 public:
  using Clock = std::chrono::steady_clock;

  constexpr MonoTime() = default;  // The clock's epoch; see Min().
  static MonoTime Now() { return MonoTime(Clock::now()); }
  // The same clock, read cheaply (no hardware counter) at the kernel tick's
  // resolution, a few milliseconds behind Now() at most: for checks against
  // thresholds far above that, before reading Now().
  static MonoTime NowCoarse();
  static constexpr MonoTime Min() { return MonoTime(Clock::time_point::min()); }
  static constexpr MonoTime Max() { return MonoTime(Clock::time_point::max()); }

  Clock::time_point time_point() const { return tp_; }
  bool IsMax() const { return tp_ == Clock::time_point::max(); }

  // Both saturate instead of wrapping: Now() + a huge timeout stays "far
  // future", and Min() - Now() (a deadline of "already expired") stays a
  // huge negative delta. Inline: every call takes several.
  MonoTime operator+(MonoDelta d) const {
    using Rep = Clock::duration::rep;
    Rep add =
        std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(d.ToNanoseconds()))
            .count();
    Rep sum;
    if (__builtin_add_overflow(tp_.time_since_epoch().count(), add, &sum)) {
      return add > 0 ? Max() : Min();
    }
    return MonoTime(Clock::time_point(Clock::duration(sum)));
  }
  MonoTime operator-(MonoDelta d) const {
    return *this + MonoDelta::FromNanoseconds(-d.ToNanoseconds());
  }
  MonoDelta operator-(MonoTime o) const {
    using std::chrono::duration_cast;
    using std::chrono::nanoseconds;
    int64_t a = duration_cast<nanoseconds>(tp_.time_since_epoch()).count();
    int64_t b = duration_cast<nanoseconds>(o.tp_.time_since_epoch()).count();
    int64_t diff;
    if (__builtin_sub_overflow(a, b, &diff)) {
      diff = a > b ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    }
    return MonoDelta::FromNanoseconds(diff);
  }
  auto operator<=>(const MonoTime&) const = default;

 private:
  constexpr explicit MonoTime(Clock::time_point tp) : tp_(tp) {}
  Clock::time_point tp_{};
};

// A point in time by which something must finish; Infinite() never expires.
class Deadline {
 public:
  static Deadline Infinite() { return Deadline(MonoTime::Max()); }
  static Deadline After(MonoDelta d) { return Deadline(MonoTime::Now() + d); }
  static Deadline At(MonoTime t) { return Deadline(t); }

  bool is_infinite() const { return when_.IsMax(); }
  bool Expired() const { return !is_infinite() && MonoTime::Now() >= when_; }
  // Time left, never negative; meaningless when infinite.
  MonoDelta Remaining() const;
  MonoTime when() const { return when_; }

 private:
  explicit Deadline(MonoTime t) : when_(t) {}
  MonoTime when_;
};

}  // namespace osprey
