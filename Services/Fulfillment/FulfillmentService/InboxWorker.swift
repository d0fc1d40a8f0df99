import Logging
import ServiceLifecycle

/// Fulfillment's background work, under the executable's service group (which starts and stops it): the notifications
/// recorded to be processed later (`processLaterQueue`); every `interval`, the inbox's due entries (retries of
/// notifications whose first processing failed, and ones left by a process that died mid-way, after their lease) and
/// the outbox (`deliverOutbox`, also woken right after a commit that owes something); and, every `reconcileInterval`,
/// a reconciliation with Apple (`reconcile`: Notification History and the subscription status sweep). Listed after
/// the store and before the server in the executable's group, so it stops before the database closes.
public struct InboxWorker: Service {
    let service: FulfillmentService
    let interval: Duration
    let logger: Logger

    /// How often to reconcile with Apple (`FulfillmentService.reconcile`); nil: never (on demand only).
    let reconcileInterval: Duration?

    public init(service: FulfillmentService, interval: Duration = .seconds(5), reconcileInterval: Duration? = nil, logger: Logger) {
        self.service = service
        self.interval = interval
        self.reconcileInterval = reconcileInterval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.service.processLaterQueue() }
                await self.drain()
                group.cancelAll()
            }
        }
    }

    /// Every `interval` (or at once when a commit owes something): due notifications, the outbox, reconciliation.
    private func drain() async {
        var nextReconcile = ContinuousClock.now
        while !Task.isCancelled {
            if let every = self.reconcileInterval, ContinuousClock.now >= nextReconcile {
                nextReconcile = ContinuousClock.now + every
                do {
                    _ = try await self.service.support.reconcile()  // its report is for callers of fulfillment.reconcile
                } catch {
                    self.logger.warning("reconciliation with Apple failed; will try at the next interval", metadata: ["error": "\(error)"])
                }
            }
            let more = await self.step()
            // Woken early by a commit that owes something (its first attempt follows at once).
            if !more { await self.service.outboxWakeup.wait(upTo: self.interval) }
        }
    }

    /// The inbox's due notifications, then ONE batch of the outbox; true when the outbox had a whole batch (more is due).
    /// One batch at a time, the inbox between batches: Finish Transaction goes at Apple's pace (two seconds a batch), so a
    /// backlog of it must not keep the worker from a refund due again.
    package func step() async -> Bool {
        do {
            // Whole batches mean more is due: keep going until the backlog is drained (`takesAnotherBatch`).
            while !Task.isCancelled {
                let batch = try await self.service.notifications.processDueBatch()
                guard NotificationProcessor.takesAnotherBatch(whole: batch.whole, ended: batch.ended) else { break }
            }
        } catch {
            self.logger.warning("the notification inbox could not be read; will try again", metadata: ["error": "\(error)"])
        }
        do {
            return try await self.service.outbox.deliverOutbox() == 100
        } catch {
            self.logger.warning("the outbox could not be read; will try again", metadata: ["error": "\(error)"])
            return false
        }
    }
}
