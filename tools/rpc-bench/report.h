// rpc-bench's reports: Kudu's text format, and one JSON object per mode.
// Main thread, after a run.
#pragma once

#include <string>

#include "load.h"

namespace osprey::bench {

// Six significant digits as Kudu prints, never in exponent form.
std::string Num(double v);
void PrintText(const Settings& cfg, const Results& r);
void PrintJson(const Settings& cfg, const Results& r);

}  // namespace osprey::bench
