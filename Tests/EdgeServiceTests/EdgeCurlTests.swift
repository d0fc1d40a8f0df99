import Foundation
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

@testable import EdgeService

/// The edge as a client nobody here wrote sees it: curl over real TLS (a certificate made in the test),
/// once with HTTP/2 and once with HTTP/1.1.
@Suite struct EdgeCurlTests {
    struct Answer {
        var version: String
        var status: Int
        var body: String
    }

    /// curl with the test's CA; `-w` appends "\n<http_version> <http_code>" to the body.
    static func curl(_ protocolFlag: String, ca: URL, _ arguments: [String]) async throws -> Answer {
        let run = try await Subprocess.run(
            "/usr/bin/env",
            ["curl", "-sS", protocolFlag, "--cacert", ca.path, "-w", "\n%{http_version} %{http_code}", "--max-time", "60"] + arguments)
        #expect(run.status == 0, "curl failed: \(run.stderr)")
        let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let tail = (lines.last ?? "").split(separator: " ")
        return Answer(
            version: tail.first.map(String.init) ?? "", status: Int(tail.last ?? "") ?? 0,
            body: lines.dropLast().joined(separator: "\n"))
    }

    @Test(arguments: [("--http2", "2"), ("--http1.1", "1.1")])
    func curlReachesThePublicMethodsOverTLS(flag: String, version: String) async throws {
        let (dir, _, tls) = try EdgeTests.localhostCertificate()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = dir.appendingPathComponent("cert.pem")
        try await SuiteFixture.with { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            config.burst = 8
            config.requestsPerSecond = 0.01
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config,
                logger: EdgeFixture.quiet)
            try await EdgeFixture.serving(edge, tls: tls) { port in
                let url = "https://localhost:\(port)/v1/rpc"
                func post(_ body: String, _ extra: [String] = []) async throws -> Answer {
                    try await Self.curl(flag, ca: ca, ["-H", "Content-Type: application/json", "--data-binary", body] + extra + [url])
                }
                let registered = try await post(
                    #"{"jsonrpc":"2.0","id":1,"method":"accounts.register","params":{"username":"curly","password":"correct horse battery"}}"#)
                #expect(registered.version == version && registered.status == 200)
                let token = try #require(try JSONValue.parse(registered.body)["result"]?["session"]?["token"]?.stringValue)
                // Bearer session; a batch; a notification-only batch; an admin method that does not exist here.
                let balance = try await post(
                    #"{"jsonrpc":"2.0","id":2,"method":"fulfillment.getBalance"}"#, ["-H", "Authorization: Bearer \(token)"])
                #expect(balance.body.contains(#""balance":0"#), "\(balance.body)")
                let batch = try await post(#"[{"jsonrpc":"2.0","id":"a","method":"catalog.listProducts"},{"jsonrpc":"2.0","id":"b","method":"x.y"}]"#)
                let replies = try JSONValue.parse(batch.body).arrayValue ?? []
                #expect(batch.status == 200 && replies.count == 2)
                #expect(try await post(#"[{"jsonrpc":"2.0","method":"catalog.listProducts"}]"#).status == 204)
                let admin = try await post(
                    #"{"jsonrpc":"2.0","id":3,"method":"catalog.retireProduct","params":{"adminToken":"\#(SuiteFixture.adminToken)"}}"#)
                #expect(admin.body.contains(#""code":-32601"#))
                // 415, then 413 (the body from a file: 3 MiB), then the bucket (8 per address) runs out: 429.
                let text = try await Self.curl(flag, ca: ca, ["-H", "Content-Type: text/plain", "--data-binary", "{}", url])
                #expect(text.status == 415)
                let big = dir.appendingPathComponent("big.json")
                try Data(repeating: 0x20, count: 3 << 20).write(to: big)
                #expect(try await post("@\(big.path)").status == 413)
                var last = 0
                for _ in 0..<4 { last = try await post(#"{"jsonrpc":"2.0","id":4,"method":"catalog.listProducts"}"#).status }
                #expect(last == 429)
            }
        }
    }
}
