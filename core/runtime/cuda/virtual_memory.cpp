#include "runtime/cuda/virtual_memory.h"

#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "common/error.h"
#include "runtime/cuda/cuda_check.h"

namespace mosaic::cuda {
namespace {

// The driver's virtual-memory entry points, fetched once.
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
};

template <class F>
bool fetch(const char* name, F& to) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) return false;
  to = reinterpret_cast<F>(fn);
  return true;
}

// Null where this driver lacks one of them.
const Driver* found_driver() {
  static const std::optional<Driver> d = []() -> std::optional<Driver> {
    Driver x;
    const bool all = fetch("cuMemGetAllocationGranularity", x.granularity) && fetch("cuMemCreate", x.create) &&
                     fetch("cuMemRelease", x.release) && fetch("cuMemAddressReserve", x.reserve) &&
                     fetch("cuMemAddressFree", x.free) && fetch("cuMemMap", x.map) && fetch("cuMemUnmap", x.unmap) &&
                     fetch("cuMemSetAccess", x.set_access) && fetch("cuDeviceGetAttribute", x.attribute);
    return all ? std::optional<Driver>(x) : std::nullopt;
  }();
  return d ? &*d : nullptr;
}

const Driver& driver() {
  if (const Driver* d = found_driver()) return *d;
  throw DeviceError("device cuda", "cuMem*", "are not all in this driver (virtual memory needs CUDA 12 or later)", "update the NVIDIA driver");
}

CUmemAllocationProp page_properties(const CUmemLocation& where) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location = where;
  return p;
}

CUmemLocation on_device(int device) {
  CUmemLocation where{};
  where.type = CU_MEM_LOCATION_TYPE_DEVICE;
  where.id = device;
  return where;
}

}  // namespace

bool PhysicalPages::supported(int device) {
  const Driver* d = found_driver();
  int yes = 0;
  return d && d->attribute(&yes, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) == CUDA_SUCCESS && yes == 1;
}

std::uint64_t PhysicalPages::page_bytes(int device) {
  const CUmemAllocationProp p = page_properties(on_device(device));
  std::size_t bytes = 0;
  MOSAIC_CUDA_CHECK(driver().granularity(&bytes, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return bytes;
}

PhysicalPages::PhysicalPages(int device, std::int64_t limit)
    : location_(on_device(device)), page_bytes_(page_bytes(device)), pool_(limit) {}

PhysicalPages::~PhysicalPages() {
  for (CUmemGenericAllocationHandle h : handles_) driver().release(h);
}

CUmemGenericAllocationHandle PhysicalPages::acquire(std::int64_t& id) {
  const auto page = pool_.acquire();
  if (!page)
    throw DeviceError("device cuda", "expert slots", "need more than the " + std::to_string(pool_.limit()) + " pages of " +
                                                         std::to_string(page_bytes_ >> 20) + " MiB they were given",
                      "lower the number of resident experts, or raise the budget");
  id = page->id;
  if (page->fresh) {
    const CUmemAllocationProp p = page_properties(location_);
    CUmemGenericAllocationHandle h{};
    const CUresult made = driver().create(&h, page_bytes_, &p, 0);
    if (made != CUDA_SUCCESS) {
      pool_.release(id);  // no memory behind it: not handed out
      MOSAIC_CUDA_CHECK(made);
    }
    handles_.push_back(h);
  }
  return handles_[static_cast<std::size_t>(id)];
}

VirtualTensor::VirtualTensor(PhysicalPages& pages, std::uint64_t slot_bytes, std::int64_t slots)
    : pages_(pages), map_(slot_bytes, slots, pages.page_bytes()), page_id_(static_cast<std::size_t>(map_.pages()), -1) {
  if (map_.reserved_bytes() > 0) MOSAIC_CUDA_CHECK(driver().reserve(&base_, map_.reserved_bytes(), 0, 0, 0));
}

VirtualTensor::~VirtualTensor() {
  const std::uint64_t page = pages_.page_bytes();
  for (std::size_t p = 0; p < page_id_.size(); ++p)
    if (page_id_[p] >= 0) {
      driver().unmap(base_ + p * page, page);
      pages_.release(page_id_[p]);
    }
  if (base_) driver().free(base_, map_.reserved_bytes());
}

void VirtualTensor::occupy(std::int64_t slot) {
  const std::uint64_t page = pages_.page_bytes();
  const std::vector<std::int64_t> wanted = map_.occupy(slot);
  try {
    for (std::int64_t p : wanted) {
      std::int64_t id = -1;
      const CUmemGenericAllocationHandle h = pages_.acquire(id);
      const CUdeviceptr at = base_ + static_cast<std::uint64_t>(p) * page;
      MOSAIC_CUDA_CHECK(driver().map(at, page, 0, h, 0));
      page_id_[static_cast<std::size_t>(p)] = id;
      CUmemAccessDesc access{};
      access.location = pages_.location();
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      MOSAIC_CUDA_CHECK(driver().set_access(at, page, &access, 1));
    }
  } catch (...) {
    vacate(slot);  // what was mapped for it goes back: the slot stays empty
    throw;
  }
}

void VirtualTensor::vacate(std::int64_t slot) {
  const std::uint64_t page = pages_.page_bytes();
  for (std::int64_t p : map_.vacate(slot)) {
    std::int64_t& id = page_id_[static_cast<std::size_t>(p)];
    if (id < 0) continue;  // its mapping failed part way
    MOSAIC_CUDA_CHECK(driver().unmap(base_ + static_cast<std::uint64_t>(p) * page, page));
    pages_.release(id);
    id = -1;
  }
}

}  // namespace mosaic::cuda
