// paco_wan_delay: a packet delay line between two network namespaces, for WAN emulation on
// machines without the kernel's netem. Each namespace holds a TUN device (made beforehand with
// `ip -n NS tuntap add dev DEV mode tun`, addressed point-to-point); this process attaches to
// both and forwards every IP packet from one to the other after a fixed one-way delay, in both
// directions, keeping their order. TCP between the namespaces then sees a real round trip of
// twice the delay: its window and ACK clock are those of a long link. A bandwidth limit comes
// from the kernel (tc htb on a TUN device's egress), not from here.
//
//   paco_wan_delay NS_A DEV_A NS_B DEV_B ONE_WAY_DELAY_MS [QUEUE_LIMIT_MB]
//
// Runs until SIGTERM or SIGINT; prints what it forwarded and dropped on exit. A direction whose
// queue holds more than QUEUE_LIMIT_MB (default 256) drops arriving packets (a full buffer).
// Needs root (setns, /dev/net/tun).
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
volatile sig_atomic_t stop = 0;

// Attaches to the TUN device `dev` of namespace `ns` (a name under /var/run/netns).
// Ensures: a non-blocking descriptor of the device, or exits with the reason.
int open_tun(const std::string& ns, const std::string& dev) {
  const int self = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int target = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (self < 0 || target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "paco_wan_delay: cannot enter namespace %s: %s\n", ns.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, dev.c_str(), IFNAMSIZ - 1);
  if (fd < 0 || ::ioctl(fd, TUNSETIFF, &ifr) != 0) {
    std::fprintf(stderr, "paco_wan_delay: cannot attach to %s in %s: %s\n", dev.c_str(), ns.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
  ::setns(self, CLONE_NEWNET);
  ::close(self);
  ::close(target);
  return fd;
}

struct packet {
  clk::time_point due;
  std::vector<unsigned char> bytes;
};

// One direction: packets read from `in`, written to `out` once due.
struct direction {
  int in = -1, out = -1;
  std::deque<packet> q;
  std::size_t queued = 0;
  unsigned long long forwarded = 0, dropped = 0, bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s NS_A DEV_A NS_B DEV_B ONE_WAY_DELAY_MS [QUEUE_LIMIT_MB]\n",
                 argv[0]);
    return 2;
  }
  const double delay_ms = std::atof(argv[5]);
  const std::size_t limit = (argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 256) << 20;
  if (!(delay_ms >= 0) || delay_ms > 10000) {
    std::fprintf(stderr, "paco_wan_delay: delay %s ms: must be in [0, 10000]\n", argv[5]);
    return 2;
  }
  const auto delay = std::chrono::duration_cast<clk::duration>(
      std::chrono::duration<double, std::milli>(delay_ms));
  const int a = open_tun(argv[1], argv[2]), b = open_tun(argv[3], argv[4]);
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop = 1; };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  direction dir[2];
  dir[0].in = a;
  dir[0].out = b;
  dir[1].in = b;
  dir[1].out = a;
  std::vector<unsigned char> buf(65536);
  std::fprintf(stderr, "paco_wan_delay: %s/%s <-> %s/%s, %.1f ms each way\n", argv[1], argv[2],
               argv[3], argv[4], delay_ms);
  while (!stop) {
    // Sleep until a packet arrives or the next one is due.
    auto now = clk::now();
    int timeout_ms = 100;
    for (auto& d : dir)
      if (!d.q.empty()) {
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(d.q.front().due - now);
        timeout_ms = std::min(timeout_ms, static_cast<int>(std::max<long long>(0, wait.count())));
      }
    pollfd pf[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    if (::poll(pf, 2, timeout_ms) < 0 && errno != EINTR) {
      std::perror("paco_wan_delay: poll");
      return 1;
    }
    now = clk::now();
    for (auto& d : dir) {
      for (;;) {  // everything waiting on the device
        const ssize_t n = ::read(d.in, buf.data(), buf.size());
        if (n <= 0) break;
        if (d.queued + static_cast<std::size_t>(n) > limit) {
          ++d.dropped;
          continue;
        }
        d.q.push_back({now + delay, {buf.begin(), buf.begin() + n}});
        d.queued += static_cast<std::size_t>(n);
      }
      while (!d.q.empty() && d.q.front().due <= now) {  // everything due, in order
        auto& p = d.q.front();
        if (::write(d.out, p.bytes.data(), p.bytes.size()) < 0 && errno == EAGAIN) break;
        ++d.forwarded;
        d.bytes += p.bytes.size();
        d.queued -= p.bytes.size();
        d.q.pop_front();
      }
    }
  }
  std::printf("delay_line forwarded %llu/%llu packets (%llu/%llu bytes), dropped %llu/%llu\n",
              dir[0].forwarded, dir[1].forwarded, dir[0].bytes, dir[1].bytes, dir[0].dropped,
              dir[1].dropped);
  return 0;
}
