#include "osprey/transport/wake_route.h"

#include <glog/logging.h>

namespace osprey::transport {

std::string_view WakeRoute::Name(Route route) {
  switch (route) {
    case Route::kReactor:
      return "reactor";
    case Route::kDormant:
      return "dormant";
    case Route::kDormantReadInterestRequested:
      return "dormant, read interest requested";
    case Route::kParkedByCaller:
      return "parked by caller";
    case Route::kParkedByWorker:
      return "parked by worker";
    case Route::kClosedWithWaiter:
      return "closed with waiter";
    case Route::kClosed:
      return "closed";
  }
  return "?";
}

std::string_view WakeRoute::Name(Event event) {
  switch (event) {
    case Event::kCallerParks:
      return "caller parks";
    case Event::kWorkerParks:
      return "worker parks";
    case Event::kUnpark:
      return "unpark";
    case Event::kCallSent:
      return "call sent";
    case Event::kRestoreReadInterest:
      return "restore read interest";
    case Event::kClose:
      return "close";
  }
  return "?";
}

}  // namespace osprey::transport
