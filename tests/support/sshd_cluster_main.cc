// hvdrun_test_cluster: the loopback SSH cluster of sshd_cluster.h as a program, for test
// suites that are not C++ (tests/python): `hvdrun_test_cluster N` starts hosts
// node1..nodeN, prints the ssh_config path on one line, and tears everything down when
// its stdin reaches EOF (so a test runner that dies takes the cluster with it).
#include <charconv>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "tests/support/sshd_cluster.h"

int main(int argc, char** argv) {
  const std::string_view arg = argc == 2 ? argv[1] : "";
  int hosts = 0;
  const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), hosts);
  if (argc != 2 || ec != std::errc() || end != arg.data() + arg.size() || hosts < 1) {
    std::cerr << "usage: hvdrun_test_cluster HOSTS  (prints the ssh_config path; stops at "
                 "stdin EOF)\n";
    return 2;
  }
  try {
    const hvdrun::testing::SshdCluster cluster(hosts);
    std::cout << cluster.ssh_config() << std::endl;
    for (std::string line; std::getline(std::cin, line);) {
    }
  } catch (const std::exception& e) {
    std::cerr << "hvdrun_test_cluster: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
