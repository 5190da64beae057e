// Runs a one-rank allreduce through the installed library and checks the result.
#include <cstdio>
#include <hiercoll/hiercoll.hpp>
#include <vector>

int main(int argc, char** argv) {
  auto store = std::make_shared<hiercoll::FileStore>(argv[1]);
  auto comm = hiercoll::Communicator::create(store, 0, 1);
  std::vector<double> in(100, 2.5), out(100, 0);
  comm.allreduce(in.data(), out.data(), in.size(), hiercoll::DataType::kFloat64, hiercoll::ReduceOp::kSum).wait();
  for (double v : out) {
    if (v != 2.5) return 1;
  }
  std::printf("consumer: hiercoll %s ok\n", hiercoll::version());
  return 0;
}
