#pragma once
// Internal: expert slots on CUDA's virtual memory (ExpertWeave's virtual weight tensor). A layer's
// slots are one reserved virtual range, its experts one contiguous tensor for the grouped kernels;
// physical pages (the driver's granularity, 2 MiB) are mapped only under slots that hold an expert
// (runtime/page_map.h), from one pool of pages every layer shares. The driver's cuMem* functions are
// fetched at run time (cudaGetDriverEntryPointByVersion), so programs still start without a driver.
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/page_map.h"

namespace mosaic::cuda {

// The physical pages of one device: created on first use, up to `limit`, kept until the pool goes.
class PhysicalPages {
 public:
  PhysicalPages(int device, std::int64_t limit);
  static bool supported(int device);  // the driver has cuMem* and the device takes them
  static std::uint64_t page_bytes(int device);  // the driver's granularity there
  ~PhysicalPages();
  PhysicalPages(const PhysicalPages&) = delete;
  PhysicalPages& operator=(const PhysicalPages&) = delete;
  std::uint64_t page_bytes() const { return page_bytes_; }
  const CUmemLocation& location() const { return location_; }
  // A page to map (its id for release); throws DeviceError when `limit` pages are in use.
  CUmemGenericAllocationHandle acquire(std::int64_t& id);
  void release(std::int64_t id) { pool_.release(id); }

 private:
  CUmemLocation location_{};
  std::uint64_t page_bytes_ = 0;
  PagePool pool_;
  std::vector<CUmemGenericAllocationHandle> handles_;  // [ids]
};

// One layer's slots: `slots` of `slot_bytes`, end to end from base().
class VirtualTensor {
 public:
  VirtualTensor(PhysicalPages& pages, std::uint64_t slot_bytes, std::int64_t slots);
  ~VirtualTensor();  // unmaps every page and frees the range; the device must be done with it
  VirtualTensor(const VirtualTensor&) = delete;
  VirtualTensor& operator=(const VirtualTensor&) = delete;
  template <class T>
  T* base() const { return reinterpret_cast<T*>(base_); }
  // Maps the pages under `slot` that are not mapped yet; before anything is written there.
  void occupy(std::int64_t slot);
  // Unmaps the pages under `slot` that no other occupied slot covers; after the device is done with them.
  void vacate(std::int64_t slot);

 private:
  PhysicalPages& pages_;
  PageMap map_;
  CUdeviceptr base_ = 0;
  std::vector<std::int64_t> page_id_;  // [virtual pages]: the physical page mapped there, -1 none
};

}  // namespace mosaic::cuda
