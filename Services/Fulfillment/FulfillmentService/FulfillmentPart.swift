import JSONRPC
import Logging
import ServiceSupport

/// A part of fulfillment with one job (`NotificationProcessor`, `SupportDesk`, `OfferDesk`, `ContentDesk`,
/// `OutboxDelivery`), sharing the service's storage, the other services, configuration, clock and logs. The service
/// itself redeems and answers reads; `FulfillmentRPC` routes each method to the part that answers it.
protocol FulfillmentPart: Sendable {
    var service: FulfillmentService { get }
}

extension FulfillmentPart {
    var store: any FulfillmentStorage { service.store }
    var dependencies: any FulfillmentDependencies { service.dependencies }
    var configuration: FulfillmentConfiguration { service.configuration }
    var clock: ServiceClock { service.clock }
    var logger: Logger { service.logger }

    func storeCall<T: Sendable>(_ body: @Sendable () async throws -> T) async throws(RPCError) -> T {
        try await service.storeCall(body)
    }
}

extension FulfillmentService {
    /// App Store Server Notifications: the inbox, processing, retries, what operators see of them.
    public var notifications: NotificationProcessor { NotificationProcessor(service: self) }
    /// Google Play's real-time developer notifications: recorded in the same inbox, brought to Google's word.
    public var playNotifications: PlayNotifications { PlayNotifications(service: self) }
    /// Operators' actions: orders, extensions, revocations' audit, reconciliation with Apple.
    public var support: SupportDesk { SupportDesk(service: self) }
    /// Subscription offers: eligibility per Apple customer, signatures.
    public var offers: OfferDesk { OfferDesk(service: self) }
    /// Downloadable content: listing, reading, signed URLs.
    public var contentDesk: ContentDesk { ContentDesk(service: self) }
    /// What is owed to outside parties after commits.
    public var outbox: OutboxDelivery { OutboxDelivery(service: self) }
    /// The event feed and webhook endpoints.
    public var events: EventDesk { EventDesk(service: self) }
    /// What the support console reads and does about one customer.
    public var customers: CustomerDesk { CustomerDesk(service: self) }
    /// Apple's Retention Messaging: what a customer about to cancel is shown.
    public var retention: RetentionDesk { RetentionDesk(service: self) }
    /// Webhook deliveries.
    public var webhookWorker: WebhookWorker { WebhookWorker(service: self) }
}
