#include "osprey/rpc/queue_delay_control.h"

#include <glog/logging.h>

namespace osprey {

void QueueDelayControl::CheckLegal(bool legal) {
  CHECK(legal) << "QueueDelayControl: a state change its table does not allow";
}

}  // namespace osprey
