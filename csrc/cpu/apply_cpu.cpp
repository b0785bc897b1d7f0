// The apply pass, instantiated once per reward dtype (see reward_types.h).
#include "apply.h"

namespace dara {

#define DARA_INSTANTIATE_APPLY(T) template DARA_APPLY(T)
DARA_REWARD_TYPES(DARA_INSTANTIATE_APPLY)

}  // namespace dara
