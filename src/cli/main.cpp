// flashnorm: fold, inspect, verify, generate, bench, serve. See README.md.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "flashnorm/error.h"
#include "list_option.h"

namespace {

// A standard descriptor closed at start (`flashnorm ... >&-`) is held by /dev/null opened the
// wrong way round, so that no file the tool opens becomes fd 0-2 (an output written through
// printf, say) and using it fails visibly: reads of stdin and writes to stdout give EBADF.
void reserve_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int got = ::open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
      if (got >= 0 && got != fd) ::close(got);  // lower descriptors were open: cannot happen
    }
  }
}

// Every integer option of `app` and its subcommands takes decimal digits only (an optional sign,
// no leading zero): CLI11 2.1 reads integers with base 0, so "-n 010" would be 8 and "0x10" 16.
void decimal_integers(CLI::App& app) {
  const CLI::Validator decimal([](std::string& v) { return flashnorm::cli::not_decimal(v); }, "");
  for (CLI::Option* o : app.get_options()) {
    const std::string t = o->get_type_name();
    // a comma-separated list (list_option.h, type "INT,...") checks its items itself
    if ((t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) && t.find(',') == std::string::npos)
      o->check(decimal);
  }
  for (CLI::App* sub : app.get_subcommands({})) decimal_integers(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  reserve_standard_descriptors();
  CLI::App app{"flashnorm: RMSNorm folding and deferred normalization for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FLASHNORM_VERSION);  // CMake's project version
  app.option_defaults()->always_capture_default();       // --help shows every default
  // Usage errors, like every other error, are one line on stderr.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return "error: " + msg + " (run with --help for usage)\n";
  });
  flashnorm::cli::register_fold(app);
  flashnorm::cli::register_inspect(app);
  flashnorm::cli::register_verify(app);
  flashnorm::cli::register_generate(app);
  flashnorm::cli::register_embed(app);
  flashnorm::cli::register_bench(app);
  flashnorm::cli::register_serve(app);
  decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help is a ParseError that exits 0
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "error: out of memory: the model's tensors or buffers do not fit in this "
                 "machine's memory (a smaller --ctx may help)\n");
    return 1;
  } catch (const std::exception& e) {
    // One line, whatever the message quotes from a file.
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
  }
  // What was printed must have arrived (a full disk, a closed pipe or descriptor): otherwise the
  // run failed, whatever it computed.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: cannot write to standard output: %s\n",
                 errno ? std::strerror(errno) : "write error");
    return 1;
  }
  return 0;
}
