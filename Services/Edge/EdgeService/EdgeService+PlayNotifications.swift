import Foundation
import HTTPTypes
import Hummingbird
import IAPProtocol
import JSONRPC
import NIOCore

/// `POST /v1/notifications/googleplay`: Google Play's real-time developer notifications, as a Pub/Sub push subscription
/// delivers them. Answered 200 once fulfillment has verified the push (its OIDC token) and recorded the message durably
/// by its `messageId` (processed from fulfillment's inbox, retried there); 403 for a push whose token is refused, 400 for
/// a body that is not a push, 503 when it cannot be recorded now. Pub/Sub sends again whatever was not answered 2xx.
extension EdgeService {
    func addPlayNotificationRoute(to router: Router<EdgeRequestContext>) {
        router.post("v1/notifications/googleplay") { request, context -> Response in
            // The same bucket per address as Apple's webhook: each push costs a verification.
            if let refusal = self.webhookAdmission(headers: request.headers, peer: context.remoteAddress?.ipAddress) {
                return refusal.response
            }
            guard let buffer = try? await request.body.collect(upTo: self.configuration.maxWebhookBodyBytes) else {
                return Response(status: .contentTooLarge)
            }
            return Response(
                status: await self.playNotification(authorization: request.headers[.authorization], body: String(buffer: buffer)))
        }
    }

    public func playNotification(authorization: String?, body: String) async -> HTTPResponse.Status {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return .unauthorized }
        guard let client = clients["fulfillment"] else { return .serviceUnavailable }
        do {
            let result = try await client.call(
                FulfillmentReceivePlayNotification.self,
                .init(
                    internalToken: configuration.internalToken, authorization: authorization, body: body,
                    processLater: configuration.webhookAnswersOnceRecorded ? true : nil),
                timeout: configuration.callTimeout)
            logger.info(
                "Google Play notification recorded",
                metadata: [
                    "messageId": "\(result.notificationUUID)", "state": "\(result.state.rawValue)", "firstDelivery": "\(result.firstDelivery)",
                ])
            return .ok
        } catch let error as RPCError where error.knownCode == .invalidReceipt {
            logger.warning("Google Play notification refused", metadata: ["reason": "\(error.data.reason)"])
            return error.data.reason == "invalidPush" ? .badRequest : .forbidden
        } catch {
            logger.error("Google Play notification could not be recorded; Pub/Sub will retry", metadata: ["error": "\(error)"])
            return .serviceUnavailable
        }
    }
}
