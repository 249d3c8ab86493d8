// Unit tier, issue #35: are stokerd's S3 requests signed as AWS, MinIO and Ceph check them?
// The tests' S3 server (s3rver) accepts any signature, so every request the Fetcher sends here
// (ranged GET, HEAD, both pages of a ListObjectsV2 with a continuation token, keys with
// spaces, '+', '=', '~' and UTF-8) is checked by tests/support/sigv4_check.hpp, written from
// AWS's specification; that checker is first held to AWS's own published example.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "objstore/fetcher.hpp"
#include "objstore/object_url.hpp"
#include "http_stub.hpp"
#include "sigv4_check.hpp"

using stoker::objstore::Addressing;
using stoker::objstore::bucket_base;
using stoker::objstore::Fetcher;
using stoker::objstore::parse_object_url;
using stoker::test::http_response;
using stoker::test::HttpStub;
using stoker::test::sigv4_problem;

TEST_CASE("sigv4 checker: AWS's published GET Object example verifies, and a changed byte does not",
          "[unit][objstore][sigv4]") {
  // AWS S3 API reference, "Signature calculations for the Authorization header", GET Object:
  // the example credentials and the signature AWS gives for this request.
  const std::string head =
      "GET /test.txt HTTP/1.1\r\n"
      "Host: examplebucket.s3.amazonaws.com\r\n"
      "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
      "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
      "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n"
      "Range: bytes=0-9\r\n"
      "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n"
      "x-amz-date: 20130524T000000Z\r\n\r\n";
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  std::string canonical;
  CHECK(sigv4_problem(head, secret, &canonical).empty());
  INFO(canonical);
  std::string other = head;
  other.replace(other.find("bytes=0-9"), 9, "bytes=0-8");
  CHECK_THAT(sigv4_problem(other, secret), Catch::Contains("is not the expected"));
  CHECK_THAT(sigv4_problem(head, secret + "x"), Catch::Contains("is not the expected"));
}

TEST_CASE("sigv4: every request stokerd's fetcher sends is signed as S3 verifies it, odd keys and a paged listing "
          "included",
          "[unit][objstore][sigv4]") {
  constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRET+=";
  // Path-style to 127.0.0.1, and virtual-host to datasets.localhost (libcurl takes any
  // *.localhost name for loopback): the bucket moves from the path into the signed Host.
  const bool virtual_host = GENERATE(false, true);
  std::mutex mu;
  std::vector<std::string> problems;
  std::vector<std::string> hosts, lines;
  int checked = 0;
  HttpStub stub([&](const std::string& head) -> std::string {
    std::string canonical;
    const std::string why = sigv4_problem(head, kSecret, &canonical);
    {
      std::lock_guard lock(mu);
      ++checked;
      const auto h = head.find("\r\nHost: ");
      hosts.push_back(h == std::string::npos ? "" : head.substr(h + 8, head.find("\r\n", h + 2) - h - 8));
      lines.push_back(head.substr(0, head.find("\r\n")));
      if (!why.empty()) problems.push_back(head.substr(0, head.find("\r\n")) + ": " + why + "\n" + canonical);
    }
    if (head.rfind("HEAD ", 0) == 0) return http_response(200, "OK", "", "Last-Modified: Sat, 28 Nov 2026 08:00:00 GMT\r\n");
    if (head.find("list-type=2") != std::string::npos) {
      // Two pages: the token has characters that must be encoded in the query.
      if (head.find("continuation-token=") == std::string::npos) {
        return http_response(200, "OK",
                             "<ListBucketResult><IsTruncated>true</IsTruncated>"
                             "<NextContinuationToken>1/a+b=c d~</NextContinuationToken>"
                             "<Contents><Key>data/a b/x.jpg</Key><Size>3</Size></Contents></ListBucketResult>");
      }
      return http_response(200, "OK",
                           "<ListBucketResult><IsTruncated>false</IsTruncated>"
                           "<Contents><Key>data/a b/y.jpg</Key><Size>3</Size></Contents></ListBucketResult>");
    }
    return http_response(206, "Partial Content", "abc", "Content-Range: bytes 0-2/100\r\n");
  });
  Fetcher::Options o;
  o.endpoint = virtual_host ? "http://localhost:" + std::to_string(stub.port()) : stub.base_url();
  o.addressing = virtual_host ? Addressing::kVirtualHost : Addressing::kPath;
  o.region = "eu-west-3";
  o.credentials.access_key = "AKIDEXAMPLE";
  o.credentials.secret_key = kSecret;
  o.credentials.source = "test";
  o.max_attempts = 1;
  Fetcher f(o);
  std::string why;
  for (const std::string key : {"plain/train-000001.tar", "data/a b+c=d/\xc3\xbcml~aut (1)#?.jpg",
                                "x/%41literal percent.tar", "deep/a/b/c/d.tar"}) {
    INFO(key);
    const auto url = parse_object_url("s3://datasets/" + key, why);
    REQUIRE(url);
    CHECK(f.get_range(*url, 0, 3).ok());
    CHECK(f.head(*url).ok());
  }
  const auto prefix = parse_object_url("s3://datasets/data/a b/", why);
  REQUIRE(prefix);
  const auto listed = f.list(*prefix, "/");
  REQUIRE(listed.ok());
  CHECK(listed->objects.size() == 2);  // both pages: the second was asked for with the token
  std::lock_guard lock(mu);
  CHECK(checked == 10);
  for (const auto& p : problems) FAIL_CHECK(p);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    if (virtual_host) {
      CHECK(hosts[i] == "datasets.localhost:" + std::to_string(stub.port()));
      CHECK(lines[i].find(" /datasets") == std::string::npos);
    } else {
      CHECK(hosts[i] == "127.0.0.1:" + std::to_string(stub.port()));
      CHECK(lines[i].find(" /datasets") != std::string::npos);
    }
  }
}

TEST_CASE("virtual-host addressing: the bucket goes into the host when it is a DNS label, else stays in the path",
          "[unit][objstore]") {
  Fetcher::Options o;
  o.endpoint = "https://s3.eu-west-3.amazonaws.com";
  o.addressing = Addressing::kVirtualHost;
  CHECK(bucket_base(o, "datasets") == "https://datasets.s3.eu-west-3.amazonaws.com");
  CHECK(bucket_base(o, "my.dotted.bucket") == "https://s3.eu-west-3.amazonaws.com/my.dotted.bucket");
  CHECK(bucket_base(o, "Upper") == "https://s3.eu-west-3.amazonaws.com/Upper");
  o.addressing = Addressing::kPath;
  CHECK(bucket_base(o, "datasets") == "https://s3.eu-west-3.amazonaws.com/datasets");
}
