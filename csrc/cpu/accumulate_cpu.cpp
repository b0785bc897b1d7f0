// The accumulate pass, instantiated once per reward dtype (see reward_types.h).
#include "accumulate.h"

namespace dara {

#define DARA_INSTANTIATE_ACCUMULATE(T) template DARA_ACCUMULATE(T)
DARA_REWARD_TYPES(DARA_INSTANTIATE_ACCUMULATE)

}  // namespace dara
