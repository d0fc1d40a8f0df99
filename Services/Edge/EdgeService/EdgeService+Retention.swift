import Foundation
import HTTPTypes
import Hummingbird
import IAPProtocol
import JSONRPC
import NIOCore

/// Apple's Retention Messaging calls the app's Get Retention Message endpoint here (`POST /v1/retention/appstore`) while a
/// customer looks at cancelling: fulfillment verifies the signed `RealtimeRequestBody`, decides from the catalog's rules
/// and its own records, and the answer (`RealtimeResponseBody`) goes back as JSON. A request that fails verification (a
/// forgery, another app's) gets 400 and changes nothing; one that cannot be answered in time gets 503 (Apple then shows
/// the default message).
extension EdgeService {
    /// Largest request body (a RealtimeRequestBody is one JWS of a few KiB).
    static let maxRetentionBodyBytes = 64 * 1024

    func addRetentionRoute(to router: Router<EdgeRequestContext>) {
        router.post("v1/retention/appstore") { request, context -> Response in
            // Each costs a verification: a bucket per address, apart from the webhook's.
            let address = self.clientAddress(peer: context.remoteAddress?.ipAddress, forwardedFor: request.headers[.xForwardedFor])
            if let wait = self.retentionLimiter.take(address) { return HTTPAnswer.tooManyRequests(wait: wait).response }
            guard let buffer = try? await request.body.collect(upTo: Self.maxRetentionBodyBytes) else {
                return Response(status: .contentTooLarge)
            }
            let (status, body) = await self.retentionAnswer(body: Array(buffer: buffer))
            guard let body else { return Response(status: status) }
            return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
    }

    struct RealtimeRequestBody: Decodable {
        var signedPayload: String
    }

    /// The status and JSON body answered for a Get Retention Message request.
    public func retentionAnswer(body: [UInt8]) async -> (HTTPResponse.Status, [UInt8]?) {
        guard let decoded = try? JSONDecoder().decode(RealtimeRequestBody.self, from: Data(body)), !decoded.signedPayload.isEmpty else {
            return (.badRequest, nil)
        }
        guard let client = clients["fulfillment"] else { return (.serviceUnavailable, nil) }
        do {
            let result = try await client.call(
                FulfillmentRetentionMessage.self,
                .init(
                    signedPayload: decoded.signedPayload, internalToken: configuration.internalToken,
                    budgetMs: max(1, Int(configuration.retentionDeadline.nanoseconds / 1_000_000) - 100)),
                timeout: configuration.retentionDeadline)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return (.ok, Array(try encoder.encode(result.response)))
        } catch let error as RPCError where error.knownCode == .invalidReceipt && error.data.reason == "appAppleIdNotConfigured" {
            logger.error("a Production retention request cannot be answered: verification has no --app-apple-id (IAP_APP_APPLE_ID)")
            return (.serviceUnavailable, nil)
        } catch let error as RPCError where error.knownCode == .invalidReceipt {
            logger.warning("retention request refused: it failed verification", metadata: ["reason": "\(error.data.reason)"])
            return (.badRequest, nil)
        } catch {
            logger.error("retention request not answered; Apple shows the default message", metadata: ["error": "\(error)"])
            return (.serviceUnavailable, nil)
        }
    }
}
