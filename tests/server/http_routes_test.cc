// The HTTP door's routes and JSON mapping, without a server.
#include <gtest/gtest.h>

#include <set>

#include "delayd/v1/delayd.pb.h"
#include "server/http/json_text.h"
#include "server/http/openapi.h"
#include "server/http/routes.h"
#include "server/http/transcode.h"

namespace delayd::http {
namespace {

std::string Var(const Match& m, const std::string& name) {
  for (const auto& [n, v] : m.bindings) {
    if (n == name) return v;
  }
  return "<unset>";
}

std::optional<Match> Find(const char* method, const char* path) {
  std::string allow;
  return MatchRoute(method, path, &allow);
}

TEST(HttpRoutes, EveryUnaryMethodHasARouteAndEveryRouteAMethod) {
  const auto* service =
      v1::SetTimerRequest::descriptor()->file()->FindServiceByName("Delayd");
  std::set<std::string> routed;
  for (const Route& r : Routes()) {
    const auto* m = service->FindMethodByName(r.rpc);
    ASSERT_NE(m, nullptr) << r.rpc;
    EXPECT_EQ(m->server_streaming(), r.kind != Route::kUnary) << r.rpc;
    routed.insert(r.rpc);
  }
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* m = service->method(i);
    if (m->server_streaming()) continue;  // events: not a unary route
    EXPECT_TRUE(routed.count(m->name())) << m->name() << " has no route";
  }
}

TEST(HttpRoutes, ResourcePathsBindNamespaceAndKey) {
  auto m = Find("PUT", "/v1/namespaces/shop/timers/order-42");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "SetTimer");
  EXPECT_EQ(Var(*m, "namespace"), "shop");
  EXPECT_EQ(Var(*m, "key"), "order-42");
  m = Find("GET", "/v1/namespaces/shop/timers");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "ListTimers");
  m = Find("POST", "/v1/namespaces/shop:drain");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "Drain");
  EXPECT_EQ(Var(*m, "namespace"), "shop");
}

TEST(HttpRoutes, NamespacesAndKeysMayHoldSlashesAndColons) {
  auto m = Find("GET", "/v1/namespaces/team/a:b/timers/x/y:z");
  ASSERT_TRUE(m);
  EXPECT_EQ(Var(*m, "namespace"), "team/a:b");
  EXPECT_EQ(Var(*m, "key"), "x/y:z");
  // The verb is matched at the end first.
  m = Find("POST", "/v1/namespaces/a:b/timers/k:move:move");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "MoveTimer");
  EXPECT_EQ(Var(*m, "namespace"), "a:b");
  EXPECT_EQ(Var(*m, "key"), "k:move");
  m = Find("POST", "/v1/namespaces/x:drain:drain");
  ASSERT_TRUE(m);
  EXPECT_EQ(Var(*m, "namespace"), "x:drain");
  // A PUT's key keeps a colon.
  m = Find("PUT", "/v1/namespaces/n/timers/k:move");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "SetTimer");
  EXPECT_EQ(Var(*m, "key"), "k:move");
}

TEST(HttpRoutes, VariablesArePercentDecodedAfterMatching) {
  auto m = Find("GET", "/v1/namespaces/team%2Fa/timers/k%20x%2F%3Amove");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rpc->name(), "GetTimer");
  EXPECT_EQ(Var(*m, "namespace"), "team/a");
  EXPECT_EQ(Var(*m, "key"), "k x/:move");
  EXPECT_EQ(m->bad_encoding, "");
  m = Find("GET", "/v1/namespaces/n/timers/%C3%A9");
  ASSERT_TRUE(m);
  EXPECT_EQ(Var(*m, "key"), "é");
  for (const char* bad :
       {"/v1/namespaces/n/timers/a%zz", "/v1/namespaces/n/timers/a%2",
        "/v1/namespaces/n/timers/a%", "/v1/namespaces/n/timers/%ff%fe"}) {
    m = Find("GET", bad);
    ASSERT_TRUE(m) << bad;
    EXPECT_EQ(m->bad_encoding, "key") << bad;
  }
}

TEST(HttpRoutes, UnknownPathsAndOtherMethodsAreToldApart) {
  std::string allow = "x";
  EXPECT_FALSE(MatchRoute("GET", "/v1/nothing", &allow));
  EXPECT_EQ(allow, "");
  EXPECT_FALSE(MatchRoute("GET", "/v1/namespaces/shop/timers/", &allow));
  EXPECT_EQ(allow, "");  // an empty key
  EXPECT_FALSE(MatchRoute("GET", "/v1/namespaces//timers/k", &allow));
  EXPECT_EQ(allow, "");  // an empty namespace
  // Another method: the ones the path takes (a 405's Allow header).
  EXPECT_FALSE(MatchRoute("PATCH", "/v1/namespaces/shop/timers/k", &allow));
  EXPECT_EQ(allow, "PUT, GET, DELETE");
  EXPECT_FALSE(MatchRoute("GET", "/v1/namespaces/shop:drain", &allow));
  EXPECT_EQ(allow, "POST");
}

grpc::Status Build(const char* method, const char* path, const char* query,
                   const char* body, google::protobuf::Message* out) {
  std::string allow;
  const auto m = MatchRoute(method, path, &allow);
  EXPECT_TRUE(m);
  return BuildRequest(*m, query, body, out);
}

TEST(HttpTranscode, BodyAndPathFillTheRequest) {
  v1::SetTimerRequest req;
  ASSERT_TRUE(Build("PUT", "/v1/namespaces/shop/timers/k", "",
                    R"({"payload": "aGk=", "delay": "1.5s", "ifAbsent": true})",
                    &req)
                  .ok());
  EXPECT_EQ(req.namespace_(), "shop");
  EXPECT_EQ(req.key(), "k");
  EXPECT_EQ(req.payload(), "hi");
  EXPECT_EQ(req.delay().seconds(), 1);
  EXPECT_EQ(req.delay().nanos(), 500'000'000);
  EXPECT_TRUE(req.if_absent());
}

TEST(HttpTranscode, TheQueryFillsARequestWithoutABody) {
  v1::ListTimersRequest req;
  ASSERT_TRUE(Build("GET", "/v1/namespaces/shop/timers",
                    "pageSize=5&key_prefix=a%2Fb+c&withoutPayloads=true", "",
                    &req)
                  .ok());
  EXPECT_EQ(req.page_size(), 5u);
  EXPECT_EQ(req.key_prefix(), "a/b c");
  EXPECT_TRUE(req.without_payloads());
  v1::RemoveTimerRequest rm;
  ASSERT_TRUE(Build("DELETE", "/v1/namespaces/shop/timers/k",
                    "expectedVersion=18446744073709551615", "", &rm)
                  .ok());
  EXPECT_EQ(rm.expected_version(), 18446744073709551615ull);
}

TEST(HttpTranscode, BadRequestsSayWhatIsWrong) {
  v1::SetTimerRequest req;
  grpc::Status s =
      Build("PUT", "/v1/namespaces/shop/timers/k", "", R"({"payload": )", &req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("body"), std::string::npos);
  s = Build("PUT", "/v1/namespaces/shop/timers/k", "", R"({"colour": 1})",
            &req);
  EXPECT_NE(s.error_message().find("colour"), std::string::npos);
  s = Build("PUT", "/v1/namespaces/shop/timers/k", "",
            R"({"namespace": "other"})", &req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("the path 'shop'"), std::string::npos);
  s = Build("PUT", "/v1/namespaces/shop/timers/k", "a=1", "{}", &req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Build("PUT", "/v1/namespaces/shop/timers/k\xfa", "", "{}", &req);
  EXPECT_NE(s.error_message().find("not valid UTF-8"), std::string::npos);
  v1::ListTimersRequest list;
  s = Build("GET", "/v1/namespaces/shop/timers", "pageSize=many", "", &list);
  EXPECT_NE(s.error_message().find("page_size"), std::string::npos);
  s = Build("GET", "/v1/namespaces/shop/timers", "colour=red", "", &list);
  EXPECT_NE(s.error_message().find("colour"), std::string::npos);
  s = Build("GET", "/v1/namespaces/shop/timers", "withoutPayloads=yes", "",
            &list);
  EXPECT_NE(s.error_message().find("true or false"), std::string::npos);
  s = Build("GET", "/v1/namespaces/shop/timers", "pageSize=1&pageSize=2", "",
            &list);
  EXPECT_NE(s.error_message().find("more than once"), std::string::npos);
  s = Build("GET", "/v1/namespaces/shop/timers", "", "{}", &list);
  EXPECT_NE(s.error_message().find("no body"), std::string::npos);
}

TEST(HttpTranscode, GrpcCodesMapAsGooglesGuideDoes) {
  using C = grpc::StatusCode;
  const std::pair<C, int> expected[] = {
      {C::OK, 200},
      {C::CANCELLED, 499},
      {C::UNKNOWN, 500},
      {C::INVALID_ARGUMENT, 400},
      {C::DEADLINE_EXCEEDED, 504},
      {C::NOT_FOUND, 404},
      {C::ALREADY_EXISTS, 409},
      {C::PERMISSION_DENIED, 403},
      {C::RESOURCE_EXHAUSTED, 429},
      {C::FAILED_PRECONDITION, 400},
      {C::ABORTED, 409},
      {C::OUT_OF_RANGE, 400},
      {C::UNIMPLEMENTED, 501},
      {C::INTERNAL, 500},
      {C::UNAVAILABLE, 503},
      {C::DATA_LOSS, 500},
      {C::UNAUTHENTICATED, 401},
  };
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(HttpStatusOf(code), http) << code;
  }
  EXPECT_EQ(
      ErrorBody(grpc::Status(C::NOT_FOUND, "no timer \"k\"")),
      R"({"error":{"code":404,"status":"NOT_FOUND","message":"no timer \"k\""}})");
}

// The OpenAPI document has every route under its path, and every schema it
// refers to. (Read as text: see json_text.h for why not as a Struct.)
TEST(HttpOpenApi, DescribesEveryRouteWithSchemasThatResolve) {
  const std::string doc = OpenApiDocument();
  EXPECT_EQ(doc.rfind(R"({"openapi":"3.0.3",)", 0), 0u);
  for (const Route& r : Routes()) {
    const std::size_t at = doc.find(json::Quote(r.path) + ":{");
    ASSERT_NE(at, std::string::npos) << r.path;
    std::string method = r.method;
    for (char& c : method) c = static_cast<char>(std::tolower(c));
    EXPECT_NE(doc.find(json::Quote(method) + ":{", at), std::string::npos)
        << r.method << " " << r.path;
  }
  const std::string mark = "#/components/schemas/";
  const std::size_t schemas = doc.find(R"("schemas":{)");
  ASSERT_NE(schemas, std::string::npos);
  int refs = 0;
  for (std::size_t at = doc.find(mark); at != std::string::npos;
       at = doc.find(mark, at + 1)) {
    const std::size_t start = at + mark.size();
    const std::string name = doc.substr(start, doc.find('"', start) - start);
    EXPECT_NE(doc.find(json::Quote(name) + R"(:{"type":"object")", schemas),
              std::string::npos)
        << name;
    ++refs;
  }
  EXPECT_GT(refs, 40);
}

TEST(HttpJsonText, QuotesEscapeAndObjectsKeepTheirOrder) {
  EXPECT_EQ(json::Quote("a\"b\\c\n\x01é"), R"("a\"b\\c\n\u0001é")");
  EXPECT_EQ(json::Object({{"z", "1"}, {"a", json::Array({"true", "\"x\""})}}),
            R"({"z":1,"a":[true,"x"]})");
  EXPECT_EQ(json::Object({}), "{}");
}

// Error bodies quote what a client sent: bytes that are no UTF-8 become
// U+FFFD, so the answer is valid JSON whatever was sent.
TEST(HttpJsonText, InvalidUtf8BecomesReplacementCharacters) {
  // A lone continuation byte, a truncated sequence, an overlong encoding,
  // a surrogate, and valid 2-, 3- and 4-byte sequences between them.
  EXPECT_EQ(json::Quote("a\x80"
                        "b\xc3"),
            R"("a\ufffdb\ufffd")");
  EXPECT_EQ(json::Quote("\xc0\xaf\xed\xa0\x80é€😀"),
            R"("\ufffd\ufffd\ufffd\ufffd\ufffdé€😀")");
  EXPECT_EQ(json::Quote("\xff/\xe2\x82"), R"("\ufffd/\ufffd\ufffd")");
}

}  // namespace
}  // namespace delayd::http
