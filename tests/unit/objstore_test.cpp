// Issue #35, the object-store layer below the sources: URL parsing, the credential chain's
// order, the ListObjectsV2 reader, and the fetcher's verdicts against a loopback stub
// (retries counted, Retry-After honoured, 404/403 told apart, no secret in any message).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "objstore/credentials.hpp"
#include "objstore/fetcher.hpp"
#include "objstore/list_xml.hpp"
#include "objstore/object_cache.hpp"
#include "objstore/object_url.hpp"
#include "http_stub.hpp"
#include "temp_dir.hpp"

using namespace stoker::objstore;
using stoker::test::http_response;
using stoker::test::HttpStub;
using stoker::test::TempDir;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

constexpr const char* kSecret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYSECRET";

Fetcher::Options fast_options(const std::string& endpoint) {
  Fetcher::Options o;
  o.endpoint = endpoint;
  o.credentials.access_key = "AKIDEXAMPLE";
  o.credentials.secret_key = kSecret;
  o.credentials.session_token = "TOKEN-SECRET-too";
  o.credentials.source = "environment (AWS_ACCESS_KEY_ID)";
  o.first_backoff = std::chrono::milliseconds(1);
  o.max_backoff = std::chrono::milliseconds(5);
  o.max_attempts = 4;
  o.connect_timeout_ms = 1000;
  return o;
}

}  // namespace

TEST_CASE("object URLs: s3 and https parse, malformed ones are refused by reason") {
  std::string why;
  auto u = parse_object_url("s3://bucket-1/imagenet/train-000.tar", why);
  REQUIRE(u);
  CHECK(u->scheme == Scheme::kS3);
  CHECK(u->bucket == "bucket-1");
  CHECK(u->key == "imagenet/train-000.tar");
  CHECK(u->text() == "s3://bucket-1/imagenet/train-000.tar");
  CHECK(u->join("lists/x.jpg") == "s3://bucket-1/imagenet/lists/x.jpg");
  CHECK(u->join("https://h/y.jpg") == "https://h/y.jpg");

  auto h = parse_object_url("https://example.test:8443/data/a.tar", why);
  REQUIRE(h);
  CHECK(h->scheme == Scheme::kHttps);
  CHECK(h->bucket == "https://example.test:8443");
  CHECK(h->text() == "https://example.test:8443/data/a.tar");

  CHECK_FALSE(parse_object_url("s3:///key", why));
  CHECK(why.find("no bucket") != std::string::npos);
  CHECK_FALSE(parse_object_url("s3://Bucket_Upper/key", why));
  CHECK_FALSE(parse_object_url("https://user:hunter2@host/x", why));
  CHECK(why.find("hunter2") == std::string::npos);
  CHECK_FALSE(parse_object_url("/local/path", why));
  CHECK(looks_like_url("s3://b/k"));
  CHECK(looks_like_url("https://h/p"));
  CHECK_FALSE(looks_like_url("/data/s3://x"));
  // An s3:// key is opaque: spaces, '#' and '?' are part of it (keys listed from a bucket
  // hold them); an http(s):// URL must be one already.
  auto spaced = parse_object_url("s3://b/cat photos/IMG #1?.jpg", why);
  REQUIRE(spaced);
  CHECK(spaced->key == "cat photos/IMG #1?.jpg");
  CHECK_FALSE(parse_object_url("https://h/a b.jpg", why));
  CHECK_FALSE(parse_object_url("https://h/a.jpg#frag", why));
  CHECK_FALSE(parse_object_url("s3://b/a\nb.jpg", why));
  CHECK(uri_encode("a b/c+d~", true) == "a%20b/c%2Bd~");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
}

TEST_CASE("credentials: the environment first, then the shared file's profile, then none") {
  TempDir dir;
  const auto file = dir.path() / "credentials";
  std::ofstream(file) << "[default]\naws_access_key_id = FILEDEFAULT\naws_secret_access_key = filesecret\n"
                         "# comment\n[ci]\naws_access_key_id=FILECI\naws_secret_access_key=cisecret\n"
                         "aws_session_token = citoken\n";
  const std::string f = file.string();

  auto env = resolve_credentials(env_of({{"AWS_ACCESS_KEY_ID", "ENVKEY"}, {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                         {"AWS_SESSION_TOKEN", "envtoken"}, {"AWS_SHARED_CREDENTIALS_FILE", f}}));
  REQUIRE(env);
  CHECK(env->access_key == "ENVKEY");
  CHECK(env->session_token == "envtoken");
  CHECK(env->source.find("environment") != std::string::npos);

  auto def = resolve_credentials(env_of({{"AWS_SHARED_CREDENTIALS_FILE", f}}));
  REQUIRE(def);
  CHECK(def->access_key == "FILEDEFAULT");
  CHECK(def->source.find("profile 'default'") != std::string::npos);

  auto ci = resolve_credentials(env_of({{"AWS_SHARED_CREDENTIALS_FILE", f}, {"AWS_PROFILE", "ci"}}));
  REQUIRE(ci);
  CHECK(ci->access_key == "FILECI");
  CHECK(ci->session_token == "citoken");

  // ~/.aws/credentials when no file is named.
  std::filesystem::create_directories(dir.path() / ".aws");
  std::filesystem::copy_file(file, dir.path() / ".aws" / "credentials");
  auto home = resolve_credentials(env_of({{"HOME", dir.path().string()}}));
  REQUIRE(home);
  CHECK(home->access_key == "FILEDEFAULT");

  auto none = resolve_credentials(env_of({{"HOME", (dir.path() / "nowhere").string()}}));
  REQUIRE(none);
  CHECK(none->empty());

  auto half = resolve_credentials(env_of({{"AWS_ACCESS_KEY_ID", "ENVKEY"}}));
  REQUIRE_FALSE(half);
  CHECK(half.status().message().find("AWS_SECRET_ACCESS_KEY is not") != std::string::npos);
  auto half2 = resolve_credentials(env_of({{"AWS_SECRET_ACCESS_KEY", kSecret}}));
  REQUIRE_FALSE(half2);
  CHECK(half2.status().message().find(kSecret) == std::string::npos);

  auto missing_profile = resolve_credentials(env_of({{"AWS_SHARED_CREDENTIALS_FILE", f}, {"AWS_PROFILE", "nope"}}));
  REQUIRE_FALSE(missing_profile);
  CHECK(missing_profile.status().message().find("[nope]") != std::string::npos);

  CHECK(resolve_region(env_of({})) == "us-east-1");
  CHECK(resolve_region(env_of({{"AWS_REGION", "eu-west-3"}, {"AWS_DEFAULT_REGION", "x"}})) == "eu-west-3");
  CHECK(resolve_endpoint("", "us-east-1", env_of({{"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}})) ==
        "http://127.0.0.1:9000");
  CHECK(resolve_endpoint("http://10.0.0.1:9000", "us-east-1", env_of({{"AWS_ENDPOINT_URL", "http://x"}})) ==
        "http://10.0.0.1:9000");
}

TEST_CASE("ListObjectsV2 pages: keys, sizes, prefixes, continuation, entities") {
  const auto page = parse_list_page(
      "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>"
      "<Contents><Key>train/cat/a&amp;b.jpg</Key><Size>123</Size></Contents>"
      "<Contents><Key>train/cat/&#x4e2d;.jpg</Key><Size>7</Size></Contents>"
      "<CommonPrefixes><Prefix>train/dog/</Prefix></CommonPrefixes>"
      "<NextContinuationToken>tok&lt;1&gt;</NextContinuationToken></ListBucketResult>");
  REQUIRE(page);
  REQUIRE(page->objects.size() == 2);
  CHECK(page->objects[0].key == "train/cat/a&b.jpg");
  CHECK(page->objects[0].size == 123);
  CHECK(page->objects[1].key == "train/cat/\xe4\xb8\xad.jpg");
  REQUIRE(page->prefixes.size() == 1);
  CHECK(page->prefixes[0] == "train/dog/");
  CHECK(page->truncated);
  CHECK(page->next_token == "tok<1>");
  CHECK_FALSE(parse_list_page("<Error><Code>AccessDenied</Code></Error>"));
  CHECK_FALSE(parse_list_page("<ListBucketResult><Contents><Key>x</Key>"));  // truncated body
}

TEST_CASE("retry delays: exponential, capped, jittered, Retry-After honoured up to its cap") {
  Fetcher::Options o;
  o.first_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(1000);
  o.max_retry_after = std::chrono::milliseconds(3000);
  CHECK(retry_delay(o, 1, std::nullopt, 0.999).count() == 99);
  CHECK(retry_delay(o, 1, std::nullopt, 0.0).count() == 50);
  CHECK(retry_delay(o, 3, std::nullopt, 0.999).count() == 399);
  CHECK(retry_delay(o, 20, std::nullopt, 0.999).count() == 999);
  CHECK(retry_delay(o, 1, 2L, 0.5).count() == 2000);
  CHECK(retry_delay(o, 1, 60L, 0.5).count() == 3000);
}

TEST_CASE("fetcher: 503, 429 with Retry-After and a reset are retried and counted, the range is asked for") {
  int n = 0;
  HttpStub stub([&](const std::string& head) -> std::string {
    switch (n++) {
      case 0: return http_response(503, "Slow Down", "<Error><Code>SlowDown</Code></Error>");
      case 1: return http_response(429, "Too Many Requests", "", "Retry-After: 1\r\n");
      case 2: {  // the head and 2 of the 5 body bytes, then a reset
        const std::string whole = http_response(206, "Partial Content", "hello", "Content-Range: bytes 10-14/100\r\n");
        return "RST:" + whole.substr(0, whole.size() - 3);
      }
      default:
        if (head.find("Range: bytes=10-14") == std::string::npos) return http_response(400, "Bad", "");
        return http_response(206, "Partial Content", "hello", "Content-Range: bytes 10-14/100\r\n");
    }
  });
  Fetcher f(fast_options(stub.base_url()));
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  const FetchResult r = f.get_range(*parse_object_url("s3://bucket/dir/obj.tar", why), 10, 5);
  const auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE(r.ok());
  CHECK(std::string(r.body.begin(), r.body.end()) == "hello");
  CHECK(f.stats().retries.load() == 3);
  CHECK(f.stats().requests.load() == 4);
  CHECK(f.stats().transient.load() == 0);
  CHECK(waited >= std::chrono::milliseconds(950));  // the Retry-After: 1
  const auto heads = stub.heads();
  REQUIRE(heads.size() == 4);
  // Path-style, signed with SigV4 and the session token; the secret itself is never sent.
  CHECK(heads[3].rfind("GET /bucket/dir/obj.tar HTTP/1.1", 0) == 0);
  CHECK(heads[3].find("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") != std::string::npos);
  CHECK(heads[3].find("x-amz-security-token: TOKEN-SECRET-too") != std::string::npos);
  CHECK(heads[3].find(kSecret) == std::string::npos);
}

TEST_CASE("fetcher: 404 is not found, 403 denied naming the credentials' source, retries end as transient, no "
          "secret in any message") {
  int n = 0;
  HttpStub stub([&](const std::string& head) -> std::string {
    ++n;
    if (head.find("/gone") != std::string::npos) return http_response(404, "Not Found", "<Error><Code>NoSuchKey</Code></Error>");
    if (head.find("/private") != std::string::npos) return http_response(403, "Forbidden", "<Error><Code>AccessDenied</Code></Error>");
    return http_response(500, "Internal", "");
  });
  Fetcher f(fast_options(stub.base_url()));
  std::string why;
  const FetchResult gone = f.get(*parse_object_url("s3://b/gone", why));
  CHECK(gone.error == FetchError::kNotFound);
  CHECK(gone.message.find("s3://b/gone") != std::string::npos);
  CHECK(gone.message.find("NoSuchKey") != std::string::npos);
  const FetchResult denied = f.get(*parse_object_url("s3://b/private", why));
  CHECK(denied.error == FetchError::kDenied);
  CHECK(denied.message.find("environment (AWS_ACCESS_KEY_ID)") != std::string::npos);
  const FetchResult flaky = f.get(*parse_object_url("s3://b/always-500", why));
  CHECK(flaky.error == FetchError::kTransient);
  CHECK(flaky.message.find("after 4 attempt(s)") != std::string::npos);
  CHECK(f.stats().transient.load() == 1);
  CHECK(f.stats().not_found.load() == 1);
  CHECK(f.stats().denied.load() == 1);
  // Nothing listening: a connection error, retried, then transient.
  Fetcher closed(fast_options("http://127.0.0.1:1"));
  const FetchResult refused = closed.get(*parse_object_url("s3://b/k", why));
  CHECK(refused.error == FetchError::kTransient);
  for (const auto* r : {&gone, &denied, &flaky, &refused}) {
    CHECK(r->message.find(kSecret) == std::string::npos);
    CHECK(r->message.find("TOKEN-SECRET") == std::string::npos);
  }
  // Keep-alive: the requests to the stub shared connections rather than one each.
  CHECK(stub.connections() < n);
}

TEST_CASE("fetcher: credentials are re-read when their file changes, and when the store says they expired") {
  // The store accepts only what is signed with key NEWKEY; OLDKEY's signatures are answered
  // as S3 answers a session token that ran out.
  std::mutex mu;
  std::vector<std::string> keys;  // the key id of each signed request, in order
  HttpStub stub([&](const std::string& head) -> std::string {
    const auto at = head.find("Credential=");
    const std::string key = at == std::string::npos ? "" : head.substr(at + 11, head.find('/', at) - at - 11);
    {
      std::lock_guard lock(mu);
      keys.push_back(key);
    }
    if (key == "NEWKEY") return http_response(200, "OK", "object");
    return http_response(400, "Bad Request", "<Error><Code>ExpiredToken</Code><Message>expired</Message></Error>");
  });
  TempDir dir;
  const auto file = dir.path() / "credentials";
  auto write_key = [&](const std::string& key) {
    std::ofstream(file, std::ios::trunc) << "[default]\naws_access_key_id = " << key
                                         << "\naws_secret_access_key = " << kSecret << "\naws_session_token = t-" << key << "\n";
  };
  const EnvLookup env = env_of({{"AWS_SHARED_CREDENTIALS_FILE", file.string()}});
  write_key("OLDKEY");
  Fetcher::Options o = fast_options(stub.base_url());
  o.credentials = *resolve_credentials(env);
  o.reload_credentials = [env] { return resolve_credentials(env); };
  std::string why;
  const auto url = *parse_object_url("s3://b/k", why);

  SECTION("expired, and the file still holds the same: denied once, naming the code and the file, no secret") {
    o.credentials_check = std::chrono::hours(1);
    Fetcher f(o);
    const FetchResult r = f.get(url);
    CHECK(r.error == FetchError::kDenied);
    CHECK_THAT(r.message, Catch::Contains("ExpiredToken") && Catch::Contains("credentials file " + file.string()));
    CHECK(r.message.find(kSecret) == std::string::npos);
    CHECK(f.stats().credential_reloads.load() == 0);
    std::lock_guard lock(mu);
    CHECK(keys == std::vector<std::string>{"OLDKEY"});  // not retried: nothing new to sign with
  }
  SECTION("expired, and the file holds new ones: signed anew and answered, one retry") {
    o.credentials_check = std::chrono::hours(1);  // only the store's answer makes it look
    Fetcher f(o);
    write_key("NEWKEY");
    const FetchResult r = f.get(url);
    REQUIRE(r.ok());
    CHECK(f.stats().credential_reloads.load() == 1);
    CHECK(f.stats().retries.load() == 1);
    std::lock_guard lock(mu);
    CHECK(keys == std::vector<std::string>{"OLDKEY", "NEWKEY"});
  }
  SECTION("the file changed: the next request is signed with what it holds now, before any failure") {
    o.credentials_check = std::chrono::milliseconds(0);
    Fetcher f(o);
    CHECK_FALSE(f.get(url).ok());
    write_key("NEWKEY");  // another size: the change is seen even within the same second
    REQUIRE(f.get(url).ok());
    std::lock_guard lock(mu);
    CHECK(keys.back() == "NEWKEY");
    CHECK(keys.size() == 2);  // the second request went out with NEWKEY at once
  }
}

TEST_CASE("fetcher: a server that accepts and goes silent is a stall: timed out, tried again, answered") {
  std::atomic<int> n{0};
  HttpStub stub([&](const std::string&) -> std::string {
    if (n++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // silent past stall_seconds
    return http_response(200, "OK", "object");
  });
  Fetcher::Options o = fast_options(stub.base_url());
  o.stall_seconds = 1;
  Fetcher f(o);
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  const FetchResult r = f.get(*parse_object_url("s3://b/k", why));
  REQUIRE(r.ok());
  CHECK(std::string(r.body.begin(), r.body.end()) == "object");
  // The stub answers one connection at a time: an attempt made while it sleeps stalls too.
  CHECK(f.stats().retries.load() >= 1);
  CHECK(f.stats().retries.load() + 1 == static_cast<std::uint64_t>(n.load()));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("object cache: LRU by bytes, files 0600, kept across a reopen, a folder others may write is refused") {
  TempDir dir;
  const auto folder = dir.path() / "cache";
  auto opened = ObjectCache::open(folder, 3 * 1100);  // room for three 1000-byte entries with their headers
  REQUIRE(opened);
  std::shared_ptr<ObjectCache> c = *opened;
  struct stat st {};
  REQUIRE(::stat(folder.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  const std::vector<std::uint8_t> a(1000, 'a'), b(1000, 'b'), d(1000, 'd'), e(1000, 'e');
  c->put("s3://x/a", a);
  c->put("s3://x/b", b);
  c->put("s3://x/d", d);
  std::vector<std::uint8_t> out;
  REQUIRE(c->get("s3://x/a", out));  // a is now the most recently used
  CHECK(out == a);
  c->put("s3://x/e", e);  // evicts b, the least recently used
  CHECK_FALSE(c->get("s3://x/b", out));
  CHECK(c->get("s3://x/d", out));
  CHECK(c->files() == 3);
  CHECK(c->bytes() <= 3 * 1100);
  for (const auto& f : std::filesystem::directory_iterator(folder)) {
    REQUIRE(::stat(f.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  c.reset();
  auto again = ObjectCache::open(folder, 3 * 1100);
  REQUIRE(again);
  CHECK((*again)->files() == 3);
  REQUIRE((*again)->get("s3://x/e", out));
  CHECK(out == e);

  // A cache file replaced by a symlink (to a file of any content) is a miss, not followed.
  std::string victim;
  for (const auto& f : std::filesystem::directory_iterator(folder)) victim = f.path().string();
  std::ofstream(dir.path() / "elsewhere") << "secret bytes";
  std::filesystem::remove(victim);
  std::filesystem::create_symlink(dir.path() / "elsewhere", victim);
  int hits = 0;
  for (const char* k : {"s3://x/a", "s3://x/d", "s3://x/e"}) hits += (*again)->get(k, out) ? 1 : 0;
  CHECK(hits == 2);

  const auto shared = dir.path() / "shared";
  std::filesystem::create_directory(shared);
  REQUIRE(::chmod(shared.c_str(), 0775) == 0);
  auto refused = ObjectCache::open(shared, 1 << 20);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.status().message(), Catch::Contains(shared.string()) && Catch::Contains("mode 0775") &&
                                             Catch::Contains("owned by uid " + std::to_string(::geteuid())));
}

TEST_CASE("fetcher with a cache: a second read of the same range sends no request") {
  HttpStub stub([&](const std::string&) {
    return http_response(206, "Partial Content", "hello", "Content-Range: bytes 10-14/100\r\n");
  });
  TempDir dir;
  Fetcher::Options o = fast_options(stub.base_url());
  auto cache = ObjectCache::open(dir.path() / "cache", 1 << 20);
  REQUIRE(cache);
  o.cache = *cache;
  Fetcher f(o);
  std::string why;
  const auto url = *parse_object_url("s3://b/shard.tar", why);
  REQUIRE(f.get_range(url, 10, 5).ok());
  const FetchResult again = f.get_range(url, 10, 5);
  REQUIRE(again.ok());
  CHECK(std::string(again.body.begin(), again.body.end()) == "hello");
  CHECK(f.stats().requests.load() == 1);
  CHECK(f.stats().cache_hits.load() == 1);
  CHECK(stub.heads().size() == 1);
}

TEST_CASE("fetcher: an http(s) URL is fetched as written, unsigned, even with credentials at hand") {
  HttpStub stub([&](const std::string&) { return http_response(200, "OK", "whole object"); });
  Fetcher f(fast_options("http://127.0.0.1:1"));  // the endpoint is for s3:// URLs only
  std::string why;
  const FetchResult r = f.get(*parse_object_url(stub.base_url() + "/data/a%20b.jpg", why));
  REQUIRE(r.ok());
  CHECK(std::string(r.body.begin(), r.body.end()) == "whole object");
  const auto heads = stub.heads();
  REQUIRE(heads.size() == 1);
  CHECK(heads[0].rfind("GET /data/a%20b.jpg HTTP/1.1", 0) == 0);
  CHECK(heads[0].find("Authorization") == std::string::npos);
  CHECK(heads[0].find("x-amz-") == std::string::npos);
  // A server that ignores Range and sends the whole object: the part asked for is kept.
  const FetchResult part = f.get_range(*parse_object_url(stub.base_url() + "/data/x", why), 6, 6);
  REQUIRE(part.ok());
  CHECK(std::string(part.body.begin(), part.body.end()) == "object");
}

TEST_CASE("fetcher: an object streamed to a descriptor is written from its start again after a cut") {
  int n = 0;
  const std::string object(300000, 'x');
  HttpStub stub([&](const std::string&) -> std::string {
    if (n++ == 0) {
      const std::string whole = http_response(200, "OK", std::string(300000, 'y'));
      return "RST:" + whole.substr(0, whole.size() - 100000);  // 200 kB of a wrong first try, then cut
    }
    return http_response(200, "OK", object);
  });
  Fetcher f(fast_options(stub.base_url()));
  TempDir dir;
  const int fd = ::open((dir.path() / "sink").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  std::string why;
  const FetchResult r = f.get_to_fd(*parse_object_url("s3://b/shard.tar", why), fd);
  REQUIRE(r.ok());
  CHECK(r.size == object.size());
  CHECK(r.body.empty());
  CHECK(f.stats().retries.load() == 1);
  std::string back(object.size() + 10, '\0');
  CHECK(::pread(fd, back.data(), back.size(), 0) == static_cast<ssize_t>(object.size()));
  back.resize(object.size());
  CHECK(back == object);
  ::close(fd);
}

TEST_CASE("fetch latency quantiles: power-of-two buckets, the bucket's upper bound reported") {
  FetchStats s;
  CHECK(s.latency_quantile_ms(0.5) == 0);
  for (int i = 0; i < 98; ++i) s.record_latency(std::chrono::microseconds(3000));  // bucket [2048, 4096) us
  s.record_latency(std::chrono::microseconds(100000));                            // [65536, 131072)
  s.record_latency(std::chrono::microseconds(100000));
  CHECK(s.latency_quantile_ms(0.5) == Approx(4.096));
  CHECK(s.latency_quantile_ms(0.98) == Approx(4.096));
  CHECK(s.latency_quantile_ms(0.99) == Approx(131.072));
}
