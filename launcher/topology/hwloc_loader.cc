// hwloc, loaded when a topology is first read, not when hvdrun starts. Most launches place
// nothing (--bind-to none, no GPU or NIC flags), and loading libhwloc and its own libraries
// (libudev) in the launcher and in every agent cost each process about 0.7 ms for nothing
// (docs/diagnosis.md, "What it costs"). The hwloc functions topology.cc calls are defined
// here; each opens the library on its first use and calls hwloc's own. The library is not
// linked, so a missing libhwloc is an error of the command that reads a topology
// (placement, `hvdrun check --topology`), which says so, not of every hvdrun.
#include <dlfcn.h>
#include <hwloc.h>

#include <stdexcept>
#include <string>

// hwloc 2.x keeps ABI 15 (its soname); another major version would need other code.
static_assert(HWLOC_API_VERSION >= 0x00020000 && HWLOC_API_VERSION < 0x00030000,
              "topology.cc is written for hwloc 2.x (libhwloc.so.15)");

namespace {

constexpr const char* kLibrary = "libhwloc.so.15";

void* library() {
  static void* const handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw std::runtime_error(std::string("hwloc's library (") + kLibrary +
                             ") cannot be loaded: " + (why != nullptr ? why : "not found") +
                             "; install it (Debian and Ubuntu: libhwloc15) to place ranks "
                             "or read the topology, or run without --bind-to, --gpus-per-rank "
                             "and --network-interfaces");
  }
  return handle;
}

// hwloc's own `name`, of the type of the function defined here under the same name.
template <typename Fn>
Fn real(const char* name) {
  void* f = ::dlsym(library(), name);
  if (f == nullptr)
    throw std::runtime_error(std::string("hwloc's library (") + kLibrary + ") has no " + name +
                             "; install hwloc 2");
  return reinterpret_cast<Fn>(f);
}

}  // namespace

// Each looks hwloc's function up once, on its first call (a function-local static: the
// lookup is thread-safe).
extern "C" {

int hwloc_topology_init(hwloc_topology_t* topologyp) {
  static const auto fn = real<decltype(&::hwloc_topology_init)>("hwloc_topology_init");
  return fn(topologyp);
}
int hwloc_topology_load(hwloc_topology_t topology) {
  static const auto fn = real<decltype(&::hwloc_topology_load)>("hwloc_topology_load");
  return fn(topology);
}
void hwloc_topology_destroy(hwloc_topology_t topology) {
  static const auto fn = real<decltype(&::hwloc_topology_destroy)>("hwloc_topology_destroy");
  fn(topology);
}
int hwloc_topology_set_synthetic(hwloc_topology_t topology, const char* description) {
  static const auto fn =
      real<decltype(&::hwloc_topology_set_synthetic)>("hwloc_topology_set_synthetic");
  return fn(topology, description);
}
int hwloc_topology_set_xmlbuffer(hwloc_topology_t topology, const char* buffer, int size) {
  static const auto fn =
      real<decltype(&::hwloc_topology_set_xmlbuffer)>("hwloc_topology_set_xmlbuffer");
  return fn(topology, buffer, size);
}
int hwloc_topology_set_io_types_filter(hwloc_topology_t topology, enum hwloc_type_filter_e filter) {
  static const auto fn =
      real<decltype(&::hwloc_topology_set_io_types_filter)>("hwloc_topology_set_io_types_filter");
  return fn(topology, filter);
}
hwloc_const_cpuset_t hwloc_topology_get_allowed_cpuset(hwloc_topology_t topology) {
  static const auto fn =
      real<decltype(&::hwloc_topology_get_allowed_cpuset)>("hwloc_topology_get_allowed_cpuset");
  return fn(topology);
}
int hwloc_get_type_depth(hwloc_topology_t topology, hwloc_obj_type_t type) {
  static const auto fn = real<decltype(&::hwloc_get_type_depth)>("hwloc_get_type_depth");
  return fn(topology, type);
}
unsigned hwloc_get_nbobjs_by_depth(hwloc_topology_t topology, int depth) {
  static const auto fn = real<decltype(&::hwloc_get_nbobjs_by_depth)>("hwloc_get_nbobjs_by_depth");
  return fn(topology, depth);
}
hwloc_obj_t hwloc_get_obj_by_depth(hwloc_topology_t topology, int depth, unsigned idx) {
  static const auto fn = real<decltype(&::hwloc_get_obj_by_depth)>("hwloc_get_obj_by_depth");
  return fn(topology, depth, idx);
}
int hwloc_get_cpubind(hwloc_topology_t topology, hwloc_cpuset_t set, int flags) {
  static const auto fn = real<decltype(&::hwloc_get_cpubind)>("hwloc_get_cpubind");
  return fn(topology, set, flags);
}
hwloc_bitmap_t hwloc_bitmap_alloc(void) {
  static const auto fn = real<decltype(&::hwloc_bitmap_alloc)>("hwloc_bitmap_alloc");
  return fn();
}
void hwloc_bitmap_free(hwloc_bitmap_t bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_free)>("hwloc_bitmap_free");
  fn(bitmap);
}
hwloc_bitmap_t hwloc_bitmap_dup(hwloc_const_bitmap_t bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_dup)>("hwloc_bitmap_dup");
  return fn(bitmap);
}
int hwloc_bitmap_and(hwloc_bitmap_t res, hwloc_const_bitmap_t bitmap1,
                     hwloc_const_bitmap_t bitmap2) {
  static const auto fn = real<decltype(&::hwloc_bitmap_and)>("hwloc_bitmap_and");
  return fn(res, bitmap1, bitmap2);
}
int hwloc_bitmap_intersects(hwloc_const_bitmap_t bitmap1, hwloc_const_bitmap_t bitmap2) {
  static const auto fn = real<decltype(&::hwloc_bitmap_intersects)>("hwloc_bitmap_intersects");
  return fn(bitmap1, bitmap2);
}
int hwloc_bitmap_isincluded(hwloc_const_bitmap_t sub_bitmap, hwloc_const_bitmap_t super_bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_isincluded)>("hwloc_bitmap_isincluded");
  return fn(sub_bitmap, super_bitmap);
}
int hwloc_bitmap_isset(hwloc_const_bitmap_t bitmap, unsigned id) {
  static const auto fn = real<decltype(&::hwloc_bitmap_isset)>("hwloc_bitmap_isset");
  return fn(bitmap, id);
}
int hwloc_bitmap_iszero(hwloc_const_bitmap_t bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_iszero)>("hwloc_bitmap_iszero");
  return fn(bitmap);
}
int hwloc_bitmap_first(hwloc_const_bitmap_t bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_first)>("hwloc_bitmap_first");
  return fn(bitmap);
}
int hwloc_bitmap_next(hwloc_const_bitmap_t bitmap, int prev) {
  static const auto fn = real<decltype(&::hwloc_bitmap_next)>("hwloc_bitmap_next");
  return fn(bitmap, prev);
}
int hwloc_bitmap_weight(hwloc_const_bitmap_t bitmap) {
  static const auto fn = real<decltype(&::hwloc_bitmap_weight)>("hwloc_bitmap_weight");
  return fn(bitmap);
}

}  // extern "C"
