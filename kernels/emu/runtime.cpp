// The emulated device's execution engine: runs a grid of an emulated kernel (cuda_emu.h) with
// every CUDA thread of a block a real thread of control, and reports — with the kernel's name —
// what would hang or be undefined on a GPU: a barrier that some threads skip or reach from
// different call sites, warp operations with inconsistent masks, a deadlock.
//
// Two engines, chosen at build time (build.rs):
// - fibers (default): one OS thread runs a whole block, its CUDA threads are fibers (own stacks,
//   switched with _setjmp/_longjmp) scheduled round-robin at rendezvous points; blocks are spread
//   over a small pool of OS threads. `__shared__` is `static thread_local`, i.e. per block.
// - OS threads (EMU_OS_THREADS=1, the sanitizer builds): a team of one OS thread per CUDA thread
//   runs the blocks one after another, rendezvous by mutex + condition variable (what
//   ThreadSanitizer understands); `__shared__` is `static`, so one block runs at a time in the
//   process.
#include "cuda_emu.h"

#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdarg.h>
#include <stdlib.h>
#include <string>
#include <thread>
#include <vector>
#if !EMU_OS_THREADS
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#endif

#define EMU_MODULE(m) extern "C" const emu::Entry* execcritic_emu_module_##m(size_t* n);
#include "emu_modules.inc"
#undef EMU_MODULE

namespace emu {
thread_local ThreadInfo* cur = nullptr;

namespace {
struct Abort {};  // unwinds the CUDA threads of a failed block

std::string vformat(const char* fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}
std::string format(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

struct Warp {
    unsigned arrived = 0, mask = 0;
    unsigned long gen = 0;
    const char* op = "";
    uint64_t vals[2][32];
};

struct Block : BlockInfo {
    const Entry* entry = nullptr;
    const Arg* args = nullptr;
    unsigned n = 0;        // threads per block
    unsigned exited = 0;   // threads that returned
    unsigned blocked = 0;  // threads waiting at a rendezvous that has not completed
    unsigned bar_arrived = 0;
    unsigned long bar_gen = 0;
    const char* bar_file = "";
    int bar_line = 0;
    std::vector<Warp> warps;
    std::vector<char> dyn_storage;
    bool failed = false;
    std::string error;
#if EMU_OS_THREADS
    std::mutex mu;
    std::condition_variable cv;
#endif

    void start(const Entry* e, const Arg* a, uint3 b, dim3 bd, dim3 gd, unsigned shared) {
        entry = e;
        args = a;
        bid = b;
        bdim = bd;
        gdim = gd;
        n = bd.x * bd.y * bd.z;
        exited = blocked = bar_arrived = 0;
        warps.assign((n + 31) / 32, Warp{});
        failed = false;
        error.clear();
        // A fresh allocation per block: AddressSanitizer sees its exact bounds.
        dyn_storage.assign(shared, 0);
        dyn_storage.shrink_to_fit();
        dyn = shared ? dyn_storage.data() : nullptr;
    }
};

Block* block_of(ThreadInfo* t) { return static_cast<Block*>(t->blk); }

std::string thread_name(ThreadInfo* t) {
    return format("block (%u,%u,%u) thread (%u,%u,%u)", t->blk->bid.x, t->blk->bid.y, t->blk->bid.z,
                  t->tid.x, t->tid.y, t->tid.z);
}

ThreadInfo thread_info(Block* b, unsigned i) {
    ThreadInfo t;
    t.tid = uint3{i % b->bdim.x, (i / b->bdim.x) % b->bdim.y, i / (b->bdim.x * b->bdim.y)};
    t.linear = i;
    t.lane = i % 32;
    t.warp = i / 32;
    t.blk = b;
    return t;
}

#if EMU_OS_THREADS
using Guard = std::unique_lock<std::mutex>;
Guard lock(Block* b) { return Guard(b->mu); }
template <class F> void wait(Block* b, Guard& g, F done) {
    b->cv.wait(g, [&] { return done() || b->failed; });
}
void wake(Block* b) { b->cv.notify_all(); }
#else
struct Guard {};
Guard lock(Block*) { return {}; }
void yield();
template <class F> void wait(Block* b, Guard&, F done) {
    while (!done() && !b->failed) yield();
}
void wake(Block*) {}
#endif

void fail_locked(Block* b, std::string msg) {
    if (!b->failed) {
        b->failed = true;
        b->error = std::move(msg);
    }
    wake(b);
}

// Every live thread waits at a rendezvous that cannot complete: what hangs a GPU.
void check_deadlock(Block* b) {
    if (!b->failed && b->blocked > 0 && b->blocked == b->n - b->exited) {
        unsigned at_bar = b->bar_arrived;
        fail_locked(b, format("deadlock in block (%u,%u,%u): %u thread(s) wait at __syncthreads (%s:%d), "
                              "%u in warp operations, %u exited",
                              b->bid.x, b->bid.y, b->bid.z, at_bar, at_bar ? b->bar_file : "-",
                              at_bar ? b->bar_line : 0, b->blocked - at_bar, b->exited));
    }
}

void thread_exit(Block* b, ThreadInfo* t) {
    Guard g = lock(b);
    b->exited++;
    if (b->bar_arrived > 0)
        fail_locked(b, format("%s exited while %u thread(s) wait at __syncthreads (%s:%d): the barrier is "
                              "skipped by some threads of the block",
                              thread_name(t).c_str(), b->bar_arrived, b->bar_file, b->bar_line));
    else
        check_deadlock(b);
}

void run_thread(Block* b, ThreadInfo* t) {
    cur = t;
    try {
        b->entry->invoke(b->entry->fn, b->args);
    } catch (Abort&) {
    } catch (std::exception& e) {
        Guard g = lock(b);
        fail_locked(b, format("%s: C++ exception: %s", thread_name(t).c_str(), e.what()));
    } catch (...) {
        Guard g = lock(b);
        fail_locked(b, format("%s: unknown C++ exception", thread_name(t).c_str()));
    }
    thread_exit(b, t);
}

#if !EMU_OS_THREADS
// ---- fibers ----
constexpr size_t STACK = 256 * 1024;
struct Fiber {
    jmp_buf jb;
    ThreadInfo ti;
    bool done = true;
    void* stack = nullptr;
};
struct Worker {
    jmp_buf sched;
    std::vector<Fiber*> fibers;
    Block* block = nullptr;
    Fiber* boot = nullptr;
    ucontext_t boot_back;
    ~Worker() {
        for (Fiber* f : fibers) {
            munmap(f->stack, STACK);
            delete f;
        }
    }
};
thread_local Worker* tw = nullptr;
thread_local Fiber* cur_fiber = nullptr;

void yield() {
    Fiber* f = cur_fiber;
    if (!_setjmp(f->jb)) _longjmp(tw->sched, 1);
}

void fiber_entry() {
    Fiber* volatile f = tw->boot;
    if (!_setjmp(f->jb)) {
        ucontext_t unused;
        swapcontext(&unused, &tw->boot_back);
    }
    for (;;) {
        run_thread(tw->block, &f->ti);
        f->done = true;
        if (!_setjmp(f->jb)) _longjmp(tw->sched, 1);
    }
}

Fiber* make_fiber(Worker* w) {
    Fiber* f = new Fiber;
    f->stack = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->stack == MAP_FAILED) throw std::bad_alloc();
    mprotect(f->stack, 4096, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting
    ucontext_t uc;
    getcontext(&uc);
    uc.uc_stack.ss_sp = f->stack;
    uc.uc_stack.ss_size = STACK;
    uc.uc_link = nullptr;
    makecontext(&uc, fiber_entry, 0);
    w->boot = f;
    swapcontext(&w->boot_back, &uc);
    return f;
}

Worker* worker() {
    static thread_local std::unique_ptr<Worker> w;
    if (!w) w.reset(new Worker);
    tw = w.get();
    return tw;
}

void run_block(Block* b) {
    Worker* w = worker();
    while (w->fibers.size() < b->n) w->fibers.push_back(make_fiber(w));
    w->block = b;
    for (unsigned i = 0; i < b->n; i++) {
        w->fibers[i]->done = false;
        w->fibers[i]->ti = thread_info(b, i);
    }
    unsigned left = b->n;
    while (left) {
        for (unsigned i = 0; i < b->n; i++) {
            Fiber* f = w->fibers[i];
            if (f->done) continue;
            cur = &f->ti;
            cur_fiber = f;
            if (!_setjmp(w->sched)) _longjmp(f->jb, 1);
            if (f->done) left--;
        }
    }
    cur = nullptr;
    cur_fiber = nullptr;
}

// A small persistent pool of OS threads that run blocks of one launch at a time.
struct Pool {
    std::mutex busy;  // held by the launch using the pool
    std::mutex mu;
    std::condition_variable cv, done_cv;
    std::vector<std::thread> threads;
    std::function<void()>* job = nullptr;
    unsigned want = 0, taken = 0, finished = 0;
    unsigned long epoch = 0;

    void ensure(unsigned k) {
        std::lock_guard<std::mutex> g(mu);
        while (threads.size() < k) {
            threads.emplace_back([this] { loop(); });
            threads.back().detach();
        }
    }
    void loop() {
        unsigned long seen = 0;
        std::unique_lock<std::mutex> g(mu);
        for (;;) {
            cv.wait(g, [&] { return epoch != seen; });
            seen = epoch;
            if (taken >= want) continue;
            taken++;
            std::function<void()>* j = job;
            g.unlock();
            (*j)();
            g.lock();
            finished++;
            done_cv.notify_all();
        }
    }
    // Starts `j` on `k` pool threads; `wait` returns when all finished.
    void start(std::function<void()>& j, unsigned k) {
        ensure(k);
        std::lock_guard<std::mutex> g(mu);
        job = &j;
        want = k;
        taken = finished = 0;
        epoch++;
        cv.notify_all();
    }
    void wait() {
        std::unique_lock<std::mutex> g(mu);
        done_cv.wait(g, [&] { return finished == want; });
        job = nullptr;
    }
};
Pool& pool() {
    static Pool* p = new Pool;  // never destroyed: its detached threads outlive main
    return *p;
}

unsigned worker_count() {
    static unsigned n = [] {
        const char* e = getenv("EXECCRITIC_EMU_WORKERS");
        long v = e ? strtol(e, nullptr, 10) : (long)std::thread::hardware_concurrency();
        return (unsigned)(v < 1 ? 1 : (v > 64 ? 64 : v));
    }();
    return n;
}
#endif

struct Launch {
    const Entry* entry;
    dim3 grid, block;
    unsigned shared;
    const Arg* args;
};

uint3 block_index(const Launch& L, unsigned long long i) {
    return uint3{(unsigned)(i % L.grid.x), (unsigned)((i / L.grid.x) % L.grid.y),
                 (unsigned)(i / ((unsigned long long)L.grid.x * L.grid.y))};
}

// Runs the grid; returns "" or the first block's error.
std::string run_grid(const Launch& L) {
    unsigned long long nblocks = (unsigned long long)L.grid.x * L.grid.y * L.grid.z;
    unsigned n = L.block.x * L.block.y * L.block.z;
#if EMU_OS_THREADS
    static std::mutex process;  // `__shared__` is process-wide in this engine
    std::lock_guard<std::mutex> pg(process);
    Block b;
    // Each CUDA thread is started through its own mutex, completion is counted under another:
    // the engine's bookkeeping must never order one CUDA thread's work before another's
    // (with a shared start mutex, a thread that finished early and re-locked it would order its
    // kernel work before a late starter's, hiding races from ThreadSanitizer).
    struct Slot {
        std::mutex mu;
        std::condition_variable cv;
        unsigned long go = 0;
        bool stop = false;
    };
    std::unique_ptr<Slot[]> slots(new Slot[n]);
    std::mutex done_mu;
    std::condition_variable done_cv;
    unsigned finished = 0;
    std::vector<std::thread> team;
    team.reserve(n);
    for (unsigned i = 0; i < n; i++) {
        team.emplace_back([&, i] {
            Slot& s = slots[i];
            unsigned long seen = 0;
            for (;;) {
                {
                    std::unique_lock<std::mutex> g(s.mu);
                    s.cv.wait(g, [&] { return s.go != seen || s.stop; });
                    if (s.stop) return;
                    seen = s.go;
                }
                ThreadInfo t = thread_info(&b, i);
                run_thread(&b, &t);
                std::lock_guard<std::mutex> g(done_mu);
                if (++finished == n) done_cv.notify_all();
            }
        });
    }
    auto signal_all = [&](bool stop) {
        for (unsigned i = 0; i < n; i++) {
            {
                std::lock_guard<std::mutex> g(slots[i].mu);
                if (stop) slots[i].stop = true;
                else slots[i].go++;
            }
            slots[i].cv.notify_one();
        }
    };
    std::string err;
    for (unsigned long long i = 0; i < nblocks && err.empty(); i++) {
        {
            std::lock_guard<std::mutex> g(done_mu);
            finished = 0;
        }
        b.start(L.entry, L.args, block_index(L, i), L.block, L.grid, L.shared);
        signal_all(false);
        std::unique_lock<std::mutex> g(done_mu);
        done_cv.wait(g, [&] { return finished == n; });
        if (b.failed) err = b.error;
    }
    signal_all(true);
    for (auto& t : team) t.join();
    return err;
#else
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::mutex em;
    std::string err;
    std::function<void()> work = [&] {
        Block b;
        for (;;) {
            unsigned long long i = next.fetch_add(1);
            if (i >= nblocks || failed.load()) break;
            b.start(L.entry, L.args, block_index(L, i), L.block, L.grid, L.shared);
            run_block(&b);
            if (b.failed) {
                std::lock_guard<std::mutex> g(em);
                if (!failed.exchange(true)) err = b.error;
            }
        }
    };
    unsigned long long helpers = std::min<unsigned long long>(worker_count(), nblocks) - 1;
    Pool& p = pool();
    if (helpers > 0 && p.busy.try_lock()) {
        p.start(work, (unsigned)helpers);
        work();  // the caller's share
        p.wait();
        p.busy.unlock();
    } else {
        work();
    }
    return err;
#endif
}

const Entry* find(const char* name) {
#define EMU_MODULE(m)                                                         \
    {                                                                         \
        size_t k = 0;                                                         \
        const Entry* e = execcritic_emu_module_##m(&k);                       \
        for (size_t i = 0; i < k; i++)                                        \
            if (!strcmp(e[i].name, name)) return &e[i];                       \
    }
#include "emu_modules.inc"
#undef EMU_MODULE
    return nullptr;
}

const char* tag_name(uint32_t t) {
    switch (t) {
        case 'p': return "a pointer";
        case 'i': return "int (i32)";
        case 'u': return "unsigned (u32)";
        case 'l': return "long long (i64)";
        case 'U': return "unsigned long long (u64)";
        case 'f': return "float (f32)";
    }
    return "an unknown type";
}

void copy_err(const std::string& s, char* err, size_t cap) {
    if (!cap) return;
    size_t k = std::min(s.size(), cap - 1);
    memcpy(err, s.data(), k);
    err[k] = 0;
}
}  // namespace

void syncthreads(const char* file, int line) {
    ThreadInfo* t = cur;
    Block* b = block_of(t);
    Guard g = lock(b);
    if (b->failed) throw Abort{};
    if (b->exited) {
        fail_locked(b, format("%s reached __syncthreads (%s:%d) after %u thread(s) of the block exited: the "
                              "barrier is skipped by some threads of the block",
                              thread_name(t).c_str(), file, line, b->exited));
        throw Abort{};
    }
    if (b->bar_arrived == 0) {
        b->bar_file = file;
        b->bar_line = line;
    } else if (line != b->bar_line || strcmp(file, b->bar_file)) {
        fail_locked(b, format("divergent __syncthreads: %s at %s:%d while %u thread(s) wait at %s:%d",
                              thread_name(t).c_str(), file, line, b->bar_arrived, b->bar_file, b->bar_line));
        throw Abort{};
    }
    if (++b->bar_arrived == b->n) {
        b->blocked -= b->n - 1;
        b->bar_arrived = 0;
        b->bar_gen++;
        wake(b);
        return;
    }
    unsigned long gen = b->bar_gen;
    b->blocked++;
    check_deadlock(b);
    wait(b, g, [&] { return b->bar_gen != gen; });
    if (b->bar_gen == gen) throw Abort{};
}

void warp_exchange(unsigned mask, uint64_t value, uint64_t* out, const char* op) {
    ThreadInfo* t = cur;
    Block* b = block_of(t);
    Guard g = lock(b);
    if (b->failed) throw Abort{};
    Warp& w = b->warps[t->warp];
    unsigned in_warp = std::min(32u, b->n - t->warp * 32);
    unsigned present = in_warp == 32 ? 0xffffffffu : ((1u << in_warp) - 1);
    if (!((mask >> t->lane) & 1u)) {
        fail_locked(b, format("%s calls %s with mask 0x%08x, which excludes its own lane %u", thread_name(t).c_str(),
                              op, mask, t->lane));
        throw Abort{};
    }
    if (mask & ~present) {
        fail_locked(b, format("%s calls %s with mask 0x%08x, but warp %u has only lanes 0x%08x (block of %u threads)",
                              thread_name(t).c_str(), op, mask, t->warp, present, b->n));
        throw Abort{};
    }
    if (w.arrived == 0) {
        w.mask = mask;
        w.op = op;
    } else if (w.mask != mask) {
        fail_locked(b, format("divergent warp operations: %s calls %s with mask 0x%08x while lanes 0x%08x wait in %s "
                              "with mask 0x%08x",
                              thread_name(t).c_str(), op, mask, w.arrived, w.op, w.mask));
        throw Abort{};
    }
    unsigned long gen = w.gen;
    w.vals[gen & 1][t->lane] = value;
    w.arrived |= 1u << t->lane;
    if (w.arrived == mask) {
        b->blocked -= (unsigned)__builtin_popcount(mask) - 1;
        w.arrived = 0;
        w.gen++;
        wake(b);
    } else {
        b->blocked++;
        check_deadlock(b);
        wait(b, g, [&] { return w.gen != gen; });
        if (w.gen == gen) throw Abort{};
    }
    memcpy(out, w.vals[gen & 1], sizeof(uint64_t) * 32);
}

void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string msg = vformat(fmt, ap);
    va_end(ap);
    ThreadInfo* t = cur;
    Block* b = block_of(t);
    Guard g = lock(b);
    fail_locked(b, thread_name(t) + ": " + msg);
    throw Abort{};
}
}  // namespace emu

// ---- the C ABI used by src/tensor/emu ----
extern "C" const char* execcritic_emu_engine() {
#if EMU_OS_THREADS
    return "os-threads";
#else
    return "fibers";
#endif
}

// The sanitizer this build was compiled with, as the compiler says ("" for none).
extern "C" const char* execcritic_emu_sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
    return "address";
#elif defined(__SANITIZE_THREAD__)
    return "thread";
#else
    return "";
#endif
}

// 0: ok; 1: no such kernel; 2: bad arguments; 3: the kernel failed (message in `err`).
extern "C" int execcritic_emu_launch(const char* name, const unsigned* grid, const unsigned* block, unsigned shared,
                                     const emu::Arg* args, size_t nargs, char* err, size_t errcap) {
    using namespace emu;
    const Entry* e = find(name);
    if (!e) return 1;
    if (nargs != e->nparams) {
        copy_err(format("%zu argument(s) given, the kernel (%s) takes %u", nargs, e->file, e->nparams), err, errcap);
        return 2;
    }
    for (size_t i = 0; i < nargs; i++)
        if (args[i].tag != (uint32_t)e->tags[i]) {
            copy_err(format("argument %zu: the kernel (%s) takes %s, given %s", i, e->file, tag_name(e->tags[i]),
                            tag_name(args[i].tag)),
                     err, errcap);
            return 2;
        }
    Launch L{e, dim3{grid[0], grid[1], grid[2]}, dim3{block[0], block[1], block[2]}, shared, args};
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2]) {
        copy_err("empty grid or block", err, errcap);
        return 2;
    }
    std::string msg;
    try {
        msg = run_grid(L);
    } catch (std::exception& ex) {
        msg = format("emulator failure: %s", ex.what());
    }
    if (!msg.empty()) {
        copy_err(msg, err, errcap);
        return 3;
    }
    return 0;
}

// The registered kernels, for listing: returns the name of kernel `i`, or null past the end.
extern "C" const char* execcritic_emu_kernel_name(size_t i) {
#define EMU_MODULE(m)                                                         \
    {                                                                         \
        size_t k = 0;                                                         \
        const emu::Entry* e = execcritic_emu_module_##m(&k);                  \
        if (i < k) return e[i].name;                                          \
        i -= k;                                                               \
    }
#include "emu_modules.inc"
#undef EMU_MODULE
    return nullptr;
}
