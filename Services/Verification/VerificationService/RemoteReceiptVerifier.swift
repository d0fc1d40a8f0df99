import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOCore

/// Where and how to reach a verifyReceipt endpoint (Apple's, or the simulator's).
public struct RemoteVerification: Sendable {
    public var productionURL: String
    public var sandboxURL: String
    /// The app-specific shared secret sent as `password`. Never logged.
    public var sharedSecret: String?
    /// Each HTTP attempt's limit.
    public var attemptTimeoutMs: Int64 = 3_000
    /// The whole call's limit, retries and redirects included.
    public var deadlineMs: Int64 = 10_000
    public var maxAttempts = 4
    /// Backoff before retry n: base * 2^(n-1), with jitter.
    public var backoffBaseMs: Int64 = 100
    /// Ask the sandbox first (a development deployment); a production receipt then comes back 21008 and
    /// is resent to production. Apple's advice for production servers is production first (the default).
    public var startWithSandbox = false

    public init(productionURL: String, sandboxURL: String, sharedSecret: String? = nil) {
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.sharedSecret = sharedSecret
    }
}

/// Calls verifyReceipt over HTTP: production first, sandbox on 21007 (and back on 21008), retries with
/// backoff on retryable statuses (21002, 21005, 21009, `is-retryable`), HTTP 5xx and network errors, all
/// within one deadline. A failure that is not the receipt's fault ends as `1020 unavailable`
/// (retryable), never as an invalid receipt.
struct RemoteReceiptVerifier: Sendable {
    let configuration: RemoteVerification
    let logger: Logger

    struct AppleAnswer: Decodable {
        let status: Int
        let environment: String?
        let receipt: ReceiptBody?
        let isRetryable: Bool?
        let isRetryableUnderscore: Bool?
        enum CodingKeys: String, CodingKey {
            case status, environment, receipt
            case isRetryable = "is-retryable", isRetryableUnderscore = "is_retryable"
        }
    }

    func verify(receiptData: String) async throws(RPCError) -> VerifyReceiptResponse {
        var body: [String: Any] = ["receipt-data": receiptData, "exclude-old-transactions": false]
        if let secret = configuration.sharedSecret { body["password"] = secret }
        guard let payload = try? JSONSerialization.data(withJSONObject: body) else { throw RPCError.internalError() }
        let deadline = NIODeadline.now() + .milliseconds(configuration.deadlineMs)
        var url = configuration.startWithSandbox ? configuration.sandboxURL : configuration.productionURL
        var redirects = 0
        var attempt = 0
        var lastProblem = "no attempt made"
        while true {
            let remaining = (deadline - NIODeadline.now()).nanoseconds / 1_000_000
            guard remaining > 0 else { break }
            attempt += 1
            do {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: payload))
                let response = try await HTTPClient.shared.execute(
                    request, timeout: .milliseconds(min(configuration.attemptTimeoutMs, remaining)))
                let bytes = try await response.body.collect(upTo: 16 << 20)
                if response.status.code >= 500 {
                    lastProblem = "HTTP \(response.status.code)"
                } else if let answer = try? JSONDecoder().decode(AppleAnswer.self, from: Data(bytes.readableBytesView)) {
                    switch answer.status {
                    case 0:
                        return VerifyReceiptResponse(status: 0, environment: answer.environment, receipt: answer.receipt)
                    case 21007 where url == configuration.productionURL && redirects < 2:
                        url = configuration.sandboxURL
                        redirects += 1
                        attempt -= 1  // a redirect is not a failed attempt
                        continue
                    case 21008 where url == configuration.sandboxURL && redirects < 2:
                        url = configuration.productionURL
                        redirects += 1
                        attempt -= 1
                        continue
                    case 21004:
                        return VerifyReceiptResponse(status: 21004, reason: "sharedSecretMismatch", environment: answer.environment)
                    case 21002, 21005, 21009, 21100...21199:
                        lastProblem = "status \(answer.status)"
                    default:
                        if answer.isRetryable == true || answer.isRetryableUnderscore == true {
                            lastProblem = "status \(answer.status) (retryable)"
                        } else {
                            return VerifyReceiptResponse(status: answer.status, reason: "remoteRejected", environment: answer.environment)
                        }
                    }
                } else {
                    lastProblem = "unreadable answer (HTTP \(response.status.code))"
                }
            } catch {
                lastProblem = "\(error)"
            }
            guard attempt < configuration.maxAttempts else { break }
            let backoff = configuration.backoffBaseMs << Int64(attempt - 1)
            let jittered = backoff / 2 + Int64.random(in: 0...max(1, backoff / 2))
            let left = (deadline - NIODeadline.now()).nanoseconds / 1_000_000
            guard left > jittered else { break }
            logger.info("verifyReceipt endpoint failed; retrying", metadata: ["attempt": "\(attempt)", "problem": "\(lastProblem)"])
            try? await Task.sleep(nanoseconds: UInt64(jittered) * 1_000_000)
        }
        logger.warning("verifyReceipt endpoint unavailable", metadata: ["attempts": "\(attempt)", "problem": "\(lastProblem)"])
        throw RPCError.unavailable(
            "the verifyReceipt endpoint did not answer usefully (\(lastProblem)) after \(attempt) attempt(s)",
            reason: "remoteUnavailable")
    }
}
