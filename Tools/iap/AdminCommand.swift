import ArgumentParser
import Foundation
import IAPProtocol

/// `iap receive-notification`: what the edge's webhook does with Apple's POST.
struct ReceiveNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receive-notification",
        abstract: "fulfillment.receiveNotification: verify a signed notification, record it in the inbox, process it.")
    @Argument(help: "The signedPayload, a file holding it, or - for standard input (e.g. from `iap sim refund ID --json`).")
    var payload: String
    @OptionGroup var client: ClientOptions
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentReceiveNotification.self, .init(signedPayload: try textArgument(payload))
        ) {
            "\($0.notificationUUID): \($0.state.rawValue)\($0.firstDelivery ? "" : " (delivered before; nothing done again)")"
        }
    }
}

/// `iap admin ...`: operator commands that need the admin token.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operator commands (admin token).", subcommands: [Notifications.self, RetryNotification.self])

    struct Notifications: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listNotifications: the notification inbox, newest first.",
            discussion: "--parked lists the ones processing gave up on; retry one with `iap admin retry-notification UUID`.")
        @Flag(help: "Only parked notifications (same as --state parked).") var parked = false
        @Option(help: "Only this state: pending, applied, ignored or parked.") var state: String?
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions

        func validate() throws {
            if let state, NotificationState(rawValue: state) == nil {
                throw ValidationError("--state must be one of: \(NotificationState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            let filter = parked ? .parked : state.flatMap(NotificationState.init(rawValue:))
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentListNotifications.self, .init(adminToken: token, state: filter, limit: limit)
            ) {
                $0.notifications.isEmpty
                    ? "no notifications"
                    : table(
                        ["uuid", "type", "state", "attempts", "received", "last error"],
                        $0.notifications.map {
                            [
                                $0.notificationUUID, $0.notificationType + ($0.subtype.map { "/\($0)" } ?? ""), $0.state.rawValue,
                                String($0.attempts), isoTime($0.receivedAtMs), $0.lastError ?? "-",
                            ]
                        })
            }
        }
    }

    struct RetryNotification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry-notification", abstract: "fulfillment.retryNotification: process a parked notification again now.")
        @Argument(help: "The notification's UUID (see `iap admin notifications --parked`).") var notificationUUID: String
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentRetryNotification.self, .init(adminToken: token, notificationUUID: notificationUUID)
            ) {
                "\($0.notificationUUID): \($0.state.rawValue) after \($0.attempts) attempt(s)\($0.lastError.map { " (last error: \($0))" } ?? "")"
            }
        }
    }
}
