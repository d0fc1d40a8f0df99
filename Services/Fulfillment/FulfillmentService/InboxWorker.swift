import Logging
import ServiceLifecycle

/// Processes the notification inbox's due entries every `interval` until graceful shutdown (retries of
/// notifications whose first processing failed, and ones left by a process that died mid-way, after their
/// lease), and the ties to make at Apple (`tieAccountsAtApple`). Listed after the store and before the server in the executable's group, so it stops before the
/// database closes.
public struct InboxWorker: Service {
    let service: FulfillmentService
    let interval: Duration
    let logger: Logger

    public init(service: FulfillmentService, interval: Duration = .seconds(5), logger: Logger) {
        self.service = service
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await self.service.processDueNotifications()
                } catch {
                    self.logger.warning("the notification inbox could not be read; will try again", metadata: ["error": "\(error)"])
                }
                do {
                    try await self.service.tieAccountsAtApple()
                } catch {
                    self.logger.warning("the account-token outbox could not be read; will try again", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: self.interval)
            }
        }
    }
}
