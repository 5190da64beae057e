// What the libfabric loader says about the host (transport/fabric/libfabric.hpp): which NICs are EFA's, from a
// made-up /sys/class/infiniband, and when the libfabric loaded cannot drive them.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "transport/fabric/libfabric.hpp"

namespace fs = std::filesystem;
using hiercoll::transport::efa_devices;
using hiercoll::transport::efa_mismatch;

namespace {

// <root>/class/infiniband/<name>/device/driver -> <root>/bus/pci/drivers/<driver>, as the kernel lays it out.
void add_device(const fs::path& root, const std::string& name, const std::string& driver) {
  const fs::path drivers = root / "bus" / "pci" / "drivers" / driver;
  fs::create_directories(drivers);
  const fs::path device = root / "class" / "infiniband" / name / "device";
  fs::create_directories(device);
  if (!driver.empty()) fs::create_directory_symlink(fs::relative(drivers, device), device / "driver");
}

}  // namespace

TEST_CASE("efa_devices finds the NICs whose driver is efa, and only those", "[libfabric]") {
  char pattern[] = "/tmp/hiercoll-sysfs-XXXXXX";
  const fs::path root = mkdtemp(pattern);
  add_device(root, "rdmap16s27", "efa");
  add_device(root, "rdmap0s6", "efa");
  add_device(root, "mlx5_0", "mlx5_core");
  add_device(root, "siw0", "");  // a software device: no PCI driver link
  CHECK(efa_devices((root / "class" / "infiniband").string()) == std::vector<std::string>{"rdmap0s6", "rdmap16s27"});
  CHECK(efa_devices((root / "nonexistent").string()).empty());  // no RDMA device at all: /sys/class/infiniband absent
  fs::remove_all(root);
}

TEST_CASE("efa_mismatch speaks only when EFA NICs meet a libfabric without efa", "[libfabric]") {
  const std::vector<std::string> nics{"rdmap0s6", "rdmap16s27"};
  CHECK(efa_mismatch({}, {"tcp", "udp"}, "/usr/lib/libfabric.so.1").empty());
  CHECK(efa_mismatch(nics, {"efa", "shm", "tcp"}, "/opt/amazon/efa/lib64/libfabric.so.1").empty());
  const std::string said = efa_mismatch(nics, {"shm", "tcp", "udp"}, "/lib/x86_64-linux-gnu/libfabric.so.1");
  CHECK_THAT(said, Catch::Contains("rdmap0s6, rdmap16s27"));
  CHECK_THAT(said, Catch::Contains("/lib/x86_64-linux-gnu/libfabric.so.1"));
  CHECK_THAT(said, Catch::Contains("/opt/amazon/efa/lib64/libfabric.so.1"));
}
