// The emulated device behind emulated_cuda.h: each thread of a block is a
// fiber on one OS thread. The orders are adversarial and seeded: blocks start
// in a shuffled order, up to kResidentBlocks at once; the scheduler runs a
// warp picked at random among every resident block's warps that can go on,
// as far as it can go (to a __syncthreads, or a warp operation its other lanes
// have not reached), its lanes in a shuffled order, each to its next warp
// operation; a block's barrier opens once its last thread arrives. So a warp
// reads another warp's shared memory before it was written wherever a barrier
// is missing, one block runs ahead of another between any two of its
// barriers, and shared memory starts as 0xff bytes (NaN, -1, an invalid bool).
// A barrier or shuffle that a live thread can no longer reach is a
// KernelError naming the kernel, the block and where each thread stands.
// Also the CUDA runtime calls csrc/cuda makes, with cuda_runtime_api.h's
// declarations.
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <numeric>
#include <sstream>
#include <utility>

#include "emulated_cuda.h"
#include "emulator.h"

#if !defined(__x86_64__)
#error "the emulation's fiber switch is written for x86-64"
#endif

// Saves the callee-saved registers and the floating-point control words on
// this stack, stores its stack pointer in *save and resumes the stack at
// `load`. glibc's swapcontext also saves the signal mask, a system call: 270 ns
// a switch on the 2-core test machine against 19 ns for this one, and the
// check's sweep resumes a thread 1.3 x 10^8 times (two switches each).
extern "C" void dara_emulation_switch(void** save, void* load);
asm(R"(
  .pushsection .text
  .p2align 4
  .globl dara_emulation_switch
  .hidden dara_emulation_switch
  .type dara_emulation_switch, @function
dara_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dara_emulation_switch, .-dara_emulation_switch
  .popsection
)");

namespace dara_emulation {

Indices indices;

namespace {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
// The dynamic shared memory a launch may take without cudaFuncSetAttribute, which the emulation lacks.
constexpr size_t kMaxDynamicShared = 48 << 10;
// Blocks in flight at once, as a GPU's multiprocessors hold several each: enough for every grid of the
// tests' small batches (13 blocks at most) to overlap in most of its blocks, few enough to bound the stacks.
constexpr unsigned kResidentBlocks = 8;
// The kernels' deepest frames (accumulate at K = 16, finalize) under ASan, and room for an ASan report.
constexpr size_t kStackBytes = 256 << 10;
constexpr size_t kGuardBytes = 4096;
constexpr unsigned char kUnwritten = 0xff;

// A fiber's stack, above a page that faults on overflow; kept for the next launch.
struct Stack {
  char* mapping;
  char* bottom() const { return mapping + kGuardBytes; }
  char* top() const { return bottom() + kStackBytes; }
};

enum class State { kRunnable, kAtWarpOp, kAtBarrier, kExited };
enum class WarpOpKind { kSync, kShuffleIndex, kShuffleDown };

struct WarpOp {
  WarpOpKind kind;
  unsigned mask;
  int lane_or_delta;
  uint64_t value;
  Site site;
};

struct Block;

struct Thread {
  Block* block;
  const Stack* stack;
  void* sp;
  void* fake_stack;  // ASan's, while switched out
  State state;
  bool started;
  Site barrier;  // where it waits, at kAtBarrier
  WarpOp op;     // at kAtWarpOp
  uint64_t result;
  uint3 index;
};

// A resident block: its threads and its shared memory, the launch's dynamic bytes and each static
// declaration, each allocated at exactly its size.
struct Block {
  unsigned linear;
  uint3 index;
  std::vector<Thread> thread;
  unsigned waiting_warps;  // warps not in the scheduler's list: every lane at a barrier or exited
  void* dynamic_shared = nullptr;
  std::vector<std::pair<const void*, void*>> declared_shared;

  void free_shared() {
    std::free(dynamic_shared);
    dynamic_shared = nullptr;
    for (auto& declared : declared_shared) std::free(declared.second);
    declared_shared.clear();
  }
};

struct Grid {
  const char* kernel;
  dim3 grid, block;
  unsigned threads, warps, blocks;
  size_t shared_bytes;
  ThreadBody body;
  const void* closure;
  std::vector<Block> resident;
  std::vector<std::pair<Block*, unsigned>> ready;  // warps with a lane that can go on
};

struct Device {
  Config config = kDefaultConfig;
  uint64_t random = 0;
  std::vector<LaunchRecord> launches;
  cudaError_t last_error = cudaSuccess;
  std::deque<Stack> stacks;  // its elements stay put as it grows
  Grid* grid = nullptr;
  Thread* running = nullptr;
  void* scheduler_sp = nullptr;
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
  std::string fiber_error;  // set by a thread, raised by the scheduler
};

Device device;

// splitmix64: the orders need no more than a seeded, well-mixed sequence.
uint64_t next_random() {
  uint64_t z = (device.random += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
void shuffle_in_place(T* first, size_t count) {
  for (size_t i = count; i > 1; --i) std::swap(first[i - 1], first[next_random() % i]);
}

bool same_site(const Site& a, const Site& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

std::string describe(const Site& s) {
  std::ostringstream out;
  out << s.file_name() << ":" << s.line() << ":" << s.column() << " (" << s.function_name() << ")";
  return out.str();
}

const char* op_name(WarpOpKind kind) {
  switch (kind) {
    case WarpOpKind::kSync:
      return "__syncwarp";
    case WarpOpKind::kShuffleIndex:
      return "__shfl_sync";
    case WarpOpKind::kShuffleDown:
      return "__shfl_down_sync";
  }
  return "?";
}

std::string where_is(const Thread& t) {
  switch (t.state) {
    case State::kExited:
      return "exited";
    case State::kAtBarrier:
      return "at __syncthreads() " + describe(t.barrier);
    case State::kAtWarpOp:
      return std::string("at ") + op_name(t.op.kind) + " " + describe(t.op.site);
    case State::kRunnable:
      return "running";
  }
  return "?";
}

// "thread 3 exited; threads 4-31 at ...": consecutive threads in one place as one range.
std::string where_threads_are(const Block& b, unsigned first, unsigned count) {
  std::ostringstream out;
  unsigned i = first;
  const char* separator = "";
  while (i < first + count) {
    const std::string place = where_is(b.thread[i]);
    unsigned j = i + 1;
    while (j < first + count && where_is(b.thread[j]) == place) ++j;
    out << separator << (j - i == 1 ? "thread " : "threads ") << i;
    if (j - i > 1) out << "-" << j - 1;
    out << " " << place;
    separator = "; ";
    i = j;
  }
  return out.str();
}

[[noreturn]] void fail(const Grid& g, const Block& b, const std::string& what) {
  std::ostringstream out;
  out << "emulated CUDA: kernel " << g.kernel << ", block " << b.linear << " of " << g.blocks << ": " << what;
  throw KernelError(out.str());
}

void* initial_stack_pointer(const Stack& s, void (*entry)()) {
  auto* sp = reinterpret_cast<uint64_t*>(s.top());
  *--sp = 0;  // entry's return address: it never returns
  *--sp = reinterpret_cast<uint64_t>(entry);
  for (int saved = 0; saved < 6; ++saved) *--sp = 0;
  uint32_t mxcsr = 0;
  uint16_t control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(control));
  *--sp = static_cast<uint64_t>(mxcsr) | static_cast<uint64_t>(control) << 32;
  return sp;
}

// From a thread back to the scheduler; returns when the scheduler resumes it.
void suspend(bool exiting) {
  Thread& t = *device.running;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &t.fake_stack, device.scheduler_stack_bottom,
                                 device.scheduler_stack_size);
  dara_emulation_switch(&t.sp, device.scheduler_sp);
  __sanitizer_finish_switch_fiber(t.fake_stack, nullptr, nullptr);
}

void thread_entry() {
  __sanitizer_finish_switch_fiber(nullptr, &device.scheduler_stack_bottom, &device.scheduler_stack_size);
  device.grid->body(device.grid->closure);
  device.running->state = State::kExited;
  suspend(true);
}

void resume(const Grid& g, Thread& t) {
  device.running = &t;
  indices.thread = t.index;
  indices.block = t.block->index;
  if (!t.started) {
    t.started = true;
    t.sp = initial_stack_pointer(*t.stack, thread_entry);
  }
  __sanitizer_start_switch_fiber(&device.scheduler_fake_stack, t.stack->bottom(), kStackBytes);
  dara_emulation_switch(&device.scheduler_sp, t.sp);
  __sanitizer_finish_switch_fiber(device.scheduler_fake_stack, nullptr, nullptr);
  device.running = nullptr;
  if (!device.fiber_error.empty()) fail(g, *t.block, std::exchange(device.fiber_error, {}));
}

unsigned lanes_in(const Grid& g, unsigned warp) { return std::min(kWarpSize, g.threads - warp * kWarpSize); }

// Completes every warp operation whose lanes have all arrived.
void complete_warp_ops(const Grid& g, Block& b, unsigned warp) {
  Thread* lanes = b.thread.data() + warp * kWarpSize;
  const unsigned present = lanes_in(g, warp);
  for (unsigned i = 0; i < present; ++i) {
    if (lanes[i].state != State::kAtWarpOp) continue;
    const WarpOp op = lanes[i].op;
    const std::string what = std::string(op_name(op.kind)) + " " + describe(op.site);
    bool all_here = true;
    for (unsigned j = 0; j < kWarpSize && all_here; ++j) {
      if (!(op.mask >> j & 1u)) continue;
      if (j >= present) {
        fail(g, b,
             what + " names lane " + std::to_string(j) + ", which warp " + std::to_string(warp) + " does not have");
      }
      const Thread& other = lanes[j];
      if (other.state == State::kExited) {
        fail(g, b,
             what + " is never reached by lane " + std::to_string(j) + " of warp " + std::to_string(warp) +
                 ", which exited: " + where_threads_are(b, warp * kWarpSize, present));
      }
      all_here = other.state == State::kAtWarpOp && other.op.kind == op.kind && other.op.mask == op.mask &&
                 same_site(other.op.site, op.site);
    }
    if (!all_here) continue;
    for (unsigned j = 0; j < kWarpSize; ++j) {
      if (!(op.mask >> j & 1u)) continue;
      Thread& lane = lanes[j];
      unsigned source = j;
      if (lane.op.kind == WarpOpKind::kShuffleIndex) source = static_cast<unsigned>(lane.op.lane_or_delta) % kWarpSize;
      if (lane.op.kind == WarpOpKind::kShuffleDown && j + lane.op.lane_or_delta < kWarpSize) {
        source = j + lane.op.lane_or_delta;
      }
      if (!(op.mask >> source & 1u)) {
        fail(g, b,
             what + ": lane " + std::to_string(j) + " reads lane " + std::to_string(source) +
                 ", which is not in the mask");
      }
      lane.result = lanes[source].op.value;
    }
    for (unsigned j = 0; j < kWarpSize; ++j) {
      if (op.mask >> j & 1u) lanes[j].state = State::kRunnable;
    }
  }
}

// Runs a warp's lanes until each has exited, waits at __syncthreads or at a warp operation that cannot
// complete (an error: only the warp's own lanes could complete it).
void run_warp(const Grid& g, Block& b, unsigned warp) {
  Thread* lanes = b.thread.data() + warp * kWarpSize;
  const unsigned present = lanes_in(g, warp);
  unsigned order[kWarpSize];
  for (;;) {
    unsigned runnable = 0;
    for (unsigned i = 0; i < present; ++i) {
      if (lanes[i].state == State::kRunnable) order[runnable++] = i;
    }
    if (runnable == 0) break;
    shuffle_in_place(order, runnable);
    for (unsigned k = 0; k < runnable; ++k) resume(g, lanes[order[k]]);
    complete_warp_ops(g, b, warp);
  }
  for (unsigned i = 0; i < present; ++i) {
    if (lanes[i].state != State::kAtWarpOp) continue;
    fail(g, b,
         std::string(op_name(lanes[i].op.kind)) + " " + describe(lanes[i].op.site) + " cannot complete in warp " +
             std::to_string(warp) + ": " + where_threads_are(b, warp * kWarpSize, present));
  }
}

void make_ready(Grid& g, Block& b) {
  for (unsigned w = 0; w < g.warps; ++w) g.ready.emplace_back(&b, w);
  b.waiting_warps = 0;
}

void admit(Grid& g, Block& b, unsigned linear) {
  b.linear = linear;
  b.index = uint3{linear % g.grid.x, linear / g.grid.x % g.grid.y, linear / (g.grid.x * g.grid.y)};
  b.dynamic_shared = std::malloc(g.shared_bytes);
  std::memset(b.dynamic_shared, kUnwritten, g.shared_bytes);
  for (Thread& t : b.thread) {
    t.state = State::kRunnable;
    t.started = false;
  }
  make_ready(g, b);
}

// Every thread of the block has exited (true), or waits at one __syncthreads(), which opens; otherwise no
// thread of it can go on.
bool settle(Grid& g, Block& b) {
  const Thread* waiting = nullptr;
  bool exited = false, elsewhere = false;
  for (const Thread& t : b.thread) {
    if (t.state == State::kExited) {
      exited = true;
    } else if (!waiting) {
      waiting = &t;
    } else if (!same_site(t.barrier, waiting->barrier)) {
      elsewhere = true;
    }
  }
  if (!waiting) return true;
  if (exited || elsewhere) {
    fail(g, b,
         "__syncthreads() " + describe(waiting->barrier) +
             " is never reached by every thread of the block: " + where_threads_are(b, 0, g.threads));
  }
  for (Thread& t : b.thread) t.state = State::kRunnable;
  make_ready(g, b);
  return false;
}

const Stack& stack_for(size_t thread) {
  while (device.stacks.size() <= thread) {
    void* mapping =
        mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) throw std::runtime_error("emulated CUDA: no memory for a thread's stack");
    mprotect(mapping, kGuardBytes, PROT_NONE);
    device.stacks.push_back(Stack{static_cast<char*>(mapping)});
  }
  return device.stacks[thread];
}

// A grid's hold on the device. A kernel error leaves frames on its unfinished threads' stacks, whose shadow is
// cleared for the next launch.
struct GridCleanup {
  Grid& g;
  ~GridCleanup() {
    for (Block& b : g.resident) {
      b.free_shared();
      for (const Thread& t : b.thread) {
        if (t.started && t.state != State::kExited) __asan_unpoison_memory_region(t.stack->bottom(), kStackBytes);
      }
    }
    device.grid = nullptr;
  }
};

void run_blocks(Grid& g) {
  std::vector<unsigned> order(g.blocks);
  std::iota(order.begin(), order.end(), 0u);
  shuffle_in_place(order.data(), order.size());
  size_t next = 0;
  g.resident.resize(std::min<size_t>(kResidentBlocks, g.blocks));
  for (size_t slot = 0; slot < g.resident.size(); ++slot) {
    Block& b = g.resident[slot];
    b.thread.resize(g.threads);
    for (unsigned i = 0; i < g.threads; ++i) {
      b.thread[i].block = &b;
      b.thread[i].stack = &stack_for(slot * g.threads + i);
      b.thread[i].index = uint3{i % g.block.x, i / g.block.x % g.block.y, i / (g.block.x * g.block.y)};
    }
    admit(g, b, order[next++]);
  }
  while (!g.ready.empty()) {
    const size_t pick = next_random() % g.ready.size();
    const auto [block, warp] = g.ready[pick];
    g.ready[pick] = g.ready.back();
    g.ready.pop_back();
    run_warp(g, *block, warp);
    if (++block->waiting_warps < g.warps || !settle(g, *block)) continue;
    block->free_shared();
    if (next < order.size()) admit(g, *block, order[next++]);
  }
}

void wait_at_warp_op(WarpOpKind kind, unsigned mask, uint64_t value, int lane_or_delta, const Site& where) {
  Thread& t = *device.running;
  const unsigned lane = static_cast<unsigned>(&t - t.block->thread.data()) % kWarpSize;
  if (!(mask >> lane & 1u)) {
    device.fiber_error = std::string(op_name(kind)) + " " + describe(where) + ": lane " + std::to_string(lane) +
                         " calls it with a mask that leaves it out";
  }
  t.op = WarpOp{kind, mask, lane_or_delta, value, where};
  t.state = State::kAtWarpOp;
  suspend(false);
}

cudaError_t launch_error(dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu ||
      threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64) {
    return cudaErrorInvalidConfiguration;
  }
  return shared_bytes > kMaxDynamicShared ? cudaErrorInvalidValue : cudaSuccess;
}

}  // namespace

void configure(const Config& config) {
  device.config = config;
  device.random = config.seed;
  device.launches.clear();
}

const std::vector<LaunchRecord>& launches() { return device.launches; }

void sync_threads(const Site& where) {
  Thread& t = *device.running;
  t.barrier = where;
  t.state = State::kAtBarrier;
  suspend(false);
}

void sync_warp(unsigned mask, const Site& where) { wait_at_warp_op(WarpOpKind::kSync, mask, 0, 0, where); }

uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t value, int lane_or_delta, const Site& where) {
  wait_at_warp_op(kind == Shuffle::kIndex ? WarpOpKind::kShuffleIndex : WarpOpKind::kShuffleDown, mask, value,
                  lane_or_delta, where);
  return device.running->result;
}

void* dynamic_shared_memory() { return device.running->block->dynamic_shared; }

void* block_shared_memory(const void* declaration, size_t bytes) {
  Block& b = *device.running->block;
  for (const auto& declared : b.declared_shared) {
    if (declared.first == declaration) return declared.second;
  }
  void* memory = std::malloc(bytes);
  std::memset(memory, kUnwritten, bytes);
  b.declared_shared.emplace_back(declaration, memory);
  return memory;
}

void run_grid(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, ThreadBody body,
              const void* closure) {
  if (device.grid) throw KernelError("emulated CUDA: a kernel launched from device code");
  device.launches.push_back(LaunchRecord{kernel_name, grid, block, shared_bytes});
  device.last_error = launch_error(grid, block, shared_bytes);
  if (device.last_error != cudaSuccess) return;
  Grid g;
  g.kernel = kernel_name;
  g.grid = grid;
  g.block = block;
  g.threads = block.x * block.y * block.z;
  g.warps = (g.threads + kWarpSize - 1) / kWarpSize;
  g.blocks = grid.x * grid.y * grid.z;
  g.shared_bytes = shared_bytes;
  g.body = body;
  g.closure = closure;
  indices.block_dim = block;
  indices.grid_dim = grid;
  device.grid = &g;
  const GridCleanup cleanup{g};
  run_blocks(g);
}

}  // namespace dara_emulation

using dara_emulation::device;

cudaError_t cudaGetLastError(void) { return std::exchange(device.last_error, cudaSuccess); }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unrecognized error code";
  }
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device_index) {
  if (device_index != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = device.config.multiprocessors;
      return cudaSuccess;
    default:
      return cudaErrorNotSupported;
  }
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t count, cudaStream_t) {
  if (!pointer) return cudaErrorInvalidValue;
  std::memset(pointer, value, count);
  return cudaSuccess;
}
