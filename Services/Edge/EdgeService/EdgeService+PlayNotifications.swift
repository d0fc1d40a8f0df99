import Foundation
import HTTPTypes
import Hummingbird
import IAPProtocol
import JSONRPC
import NIOCore
import NIOPosix

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
        (try? await playNotificationAnswer(authorization: authorization, body: Array(body.utf8), on: MultiThreadedEventLoopGroup.singleton.any())
            .get()) ?? .serviceUnavailable
    }

    /// `playNotification` on an event loop (`EventLoopRoutes`): never fails; completes on `eventLoop`. The header and the
    /// body go to fulfillment as JSON strings, exactly as sent (a body that is not UTF-8 is refused there as not a push).
    func playNotificationAnswer(authorization: String?, body: [UInt8], on eventLoop: any EventLoop) -> EventLoopFuture<HTTPResponse.Status> {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return eventLoop.makeSucceededFuture(.unauthorized) }
        let params =
            Array(#"{"authorization":"#.utf8) + JSONWriter.quoted(authorization) + Array(#","body":"#.utf8)
            + JSONWriter.quoted(String(decoding: body, as: UTF8.self))
        return recordNotification(
            method: FulfillmentReceivePlayNotification.name, params: params, store: "Google Play", sender: "Pub/Sub", on: eventLoop
        ) {
            $0.data.reason == "invalidPush" ? .badRequest : .forbidden
        }
    }
}
